/*
 * The built-in `null` device (like PennyLane's null.qubit): it accepts every operation
 * libbackline lets through, simulates nothing, and every measurement gives 0. Useful to
 * test and time compiled programs without a simulator. Built as its own plain library
 * (backline_core/lib/libbackline_device_null.so) exporting BL_DEVICE_ENTRY.
 *
 * Configuration: no keys (any non-empty config is refused).
 */
#include "backline/device.h"

#include <stdio.h>
#include <stdlib.h>

struct null_device {
    uint32_t num_qubits;
};

static int32_t null_create(const char *config, uint32_t num_qubits, uint64_t seed, void **dev, char *err,
                           size_t errlen) {
    (void)seed;
    if (config && *config) {
        snprintf(err, errlen, "the null device takes no configuration keys, got '%s'", config);
        return BL_EINVAL;
    }
    struct null_device *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return BL_ENOMEM;
    }
    d->num_qubits = num_qubits;
    *dev = d;
    return BL_OK;
}

static int32_t null_gate(void *dev, int32_t gate, const uint32_t *wires, uint32_t n_wires, const double *params,
                         uint32_t n_params) {
    return BL_OK;
}

static int32_t null_measure(void *dev, uint32_t wire, int32_t *outcome) {
    *outcome = 0;
    return BL_OK;
}

static int32_t null_reset(void *dev, uint32_t wire) { return BL_OK; }

static int32_t null_noise(void *dev, int32_t channel, const uint32_t *wires, uint32_t n_wires, double p) {
    return BL_OK;
}

static int32_t null_reset_all(void *dev) { return BL_OK; }

static void null_destroy(void *dev) { free(dev); }

static const bl_device_api null_api = {
    .abi_version = BL_DEVICE_ABI_VERSION,
    .name = "null",
    .create = null_create,
    .gate = null_gate,
    .measure = null_measure,
    .reset = null_reset,
    .noise = null_noise,
    .reset_all = null_reset_all,
    .destroy = null_destroy,
};

BL_API const bl_device_api *backline_device_v1(void) { return &null_api; }
