/*
 * Quantum-device runtimes (device.h): open a device from a shared library or an
 * in-process vtable, check every operation's arguments before the device sees it, keep
 * the error text (bl_last_error) and count operations.
 *
 * A device handle is closed once: bl_dev_close frees it, and a second close (or any call
 * after close) is undefined. bl_dev_close(NULL) is a no-op. A device is not thread-safe:
 * one thread drives it at a time.
 */
#define _GNU_SOURCE
#include "backline/device.h"
#include "internal.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEVICE_MAGIC 0x424c444556494345ull /* "BLDEVICE" */
#define CREATE_ERR_MAX 512

struct bl_device {
    uint64_t magic;
    const bl_device_api *api;
    void *impl;
    void *dl; /* NULL for an in-process vtable */
    uint32_t num_qubits;
    uint64_t ops;
};

struct op_shape {
    const char *name;
    uint32_t wires, params;
};

/* Indexed by bl_gate. */
static const struct op_shape gate_shapes[BL_GATE_COUNT] = {
    [BL_GATE_I] = {"I", 1, 0},       [BL_GATE_X] = {"X", 1, 0},       [BL_GATE_Y] = {"Y", 1, 0},
    [BL_GATE_Z] = {"Z", 1, 0},       [BL_GATE_H] = {"H", 1, 0},       [BL_GATE_S] = {"S", 1, 0},
    [BL_GATE_SDG] = {"SDG", 1, 0},   [BL_GATE_SX] = {"SX", 1, 0},     [BL_GATE_CNOT] = {"CNOT", 2, 0},
    [BL_GATE_CZ] = {"CZ", 2, 0},     [BL_GATE_SWAP] = {"SWAP", 2, 0}, [BL_GATE_RX] = {"RX", 1, 1},
    [BL_GATE_RY] = {"RY", 1, 1},     [BL_GATE_RZ] = {"RZ", 1, 1},
};

/* Indexed by bl_noise. */
static const struct op_shape noise_shapes[BL_NOISE_COUNT] = {
    [BL_NOISE_X_FLIP] = {"X_FLIP", 1, 0},           [BL_NOISE_Z_FLIP] = {"Z_FLIP", 1, 0},
    [BL_NOISE_Y_FLIP] = {"Y_FLIP", 1, 0},           [BL_NOISE_DEPOLARIZE1] = {"DEPOLARIZE1", 1, 0},
    [BL_NOISE_DEPOLARIZE2] = {"DEPOLARIZE2", 2, 0},
};

static const char *dev_name(const bl_device *d) {
    return d->api->name && *d->api->name ? d->api->name : "?";
}

static int valid(const bl_device *d) { return d && d->magic == DEVICE_MAGIC; }

#define CHECK_DEVICE(d, fn)                                                                        \
    do {                                                                                           \
        if (BL_UNLIKELY(!valid(d)))                                                                \
            return bl__fail(BL_EINVAL, fn ": not an open device (NULL, closed or not a bl_device)"); \
    } while (0)

/* A hook's failure, with the device's name and what was asked of it. Hooks have no error
 * buffer: a hook returns BL_EINVAL for an operation the device cannot apply (say, a
 * non-Clifford angle on a stabilizer simulator) and the text is written here. */
static int32_t hook_failed(const bl_device *d, int32_t rc, const char *what) {
    int32_t code = rc < 0 ? rc : BL_EBACKEND;
    return bl__fail(code, "device '%s' %s %s (%s)", dev_name(d),
                    code == BL_EINVAL ? "does not support" : "failed", what, bl_status_name(code));
}

static int32_t check_wires(const bl_device *d, const char *fn, const char *kind, const char *op,
                           const uint32_t *wires, uint32_t n_wires, uint32_t want) {
    if (n_wires != want)
        return bl__fail(BL_EINVAL, "%s: %s %s acts on %u wire%s, got %u", fn, kind, op, want,
                        want == 1 ? "" : "s", n_wires);
    if (!wires) return bl__fail(BL_EINVAL, "%s: %s %s: wires is NULL", fn, kind, op);
    for (uint32_t i = 0; i < n_wires; ++i)
        if (wires[i] >= d->num_qubits)
            return bl__fail(BL_EINVAL, "%s: %s %s: wire %u is out of range (device '%s' has %u qubits: 0..%u)",
                            fn, kind, op, wires[i], dev_name(d), d->num_qubits, d->num_qubits - 1);
    if (n_wires == 2 && wires[0] == wires[1])
        return bl__fail(BL_EINVAL, "%s: %s %s needs two distinct wires, got %u twice", fn, kind, op, wires[0]);
    return BL_OK;
}

BL_API int32_t bl_dev_open(const char *library, const bl_device_api *api, const char *config,
                           uint32_t num_qubits, uint64_t seed, bl_device **out) {
    if (!out) return bl__fail(BL_EINVAL, "bl_dev_open: out is NULL");
    *out = NULL;
    int has_lib = library && *library;
    if (has_lib == (api != NULL))
        return bl__fail(BL_EINVAL, "bl_dev_open: give exactly one of library (a device runtime's path) and "
                                   "api (an in-process vtable), got %s",
                        has_lib ? "both" : "neither");
    if (num_qubits == 0) return bl__fail(BL_EINVAL, "bl_dev_open: num_qubits must be at least 1");

    void *dl = NULL;
    const char *where = "in-process device";
    if (has_lib) {
        where = library;
        dl = dlopen(library, RTLD_NOW | RTLD_LOCAL);
        if (!dl) return bl__fail(BL_EBACKEND, "cannot load device runtime '%s': %s", library, dlerror());
        bl_device_entry_fn entry = (bl_device_entry_fn)dlsym(dl, BL_DEVICE_ENTRY);
        if (!entry) {
            dlclose(dl);
            return bl__fail(BL_EABI, "'%s' is not a Backline device runtime: it does not export %s", library,
                            BL_DEVICE_ENTRY);
        }
        api = entry();
        if (!api) {
            dlclose(dl);
            return bl__fail(BL_EABI, "device runtime '%s': %s returned NULL", library, BL_DEVICE_ENTRY);
        }
    }
    if (api->abi_version != BL_DEVICE_ABI_VERSION) {
        if (dl) dlclose(dl);
        return bl__fail(BL_EABI, "%s '%s' was built for device ABI %u, this runtime is device ABI %d; rebuild the plugin",
                        where, api->name ? api->name : "?", api->abi_version, BL_DEVICE_ABI_VERSION);
    }
    if (!api->create || !api->gate || !api->measure || !api->reset || !api->reset_all || !api->destroy) {
        if (dl) dlclose(dl);
        return bl__fail(BL_EABI, "%s '%s' leaves a required hook NULL (only noise may be NULL)", where,
                        api->name ? api->name : "?");
    }

    bl_device *d = calloc(1, sizeof *d);
    if (!d) {
        if (dl) dlclose(dl);
        return bl__fail(BL_ENOMEM, "bl_dev_open: out of memory");
    }
    d->magic = DEVICE_MAGIC;
    d->api = api;
    d->dl = dl;
    d->num_qubits = num_qubits;

    char err[CREATE_ERR_MAX];
    err[0] = '\0';
    void *impl = NULL;
    int32_t rc = api->create(config ? config : "", num_qubits, seed, &impl, err, sizeof err);
    err[sizeof err - 1] = '\0';
    if (rc != BL_OK || !impl) {
        int32_t code = rc < 0 ? rc : BL_EBACKEND;
        if (rc == BL_OK) snprintf(err, sizeof err, "create succeeded but returned no device");
        bl__fail(code, "device '%s' could not be created with %u qubits (config '%s'): %s", dev_name(d), num_qubits,
                 config ? config : "", err[0] ? err : "no detail given");
        d->magic = 0;
        free(d);
        if (dl) dlclose(dl);
        return code;
    }
    d->impl = impl;
    *out = d;
    return BL_OK;
}

BL_API int32_t bl_dev_gate(bl_device *d, int32_t gate, const uint32_t *wires, uint32_t n_wires,
                           const double *params, uint32_t n_params) {
    CHECK_DEVICE(d, "bl_dev_gate");
    if (gate < 0 || gate >= BL_GATE_COUNT)
        return bl__fail(BL_EINVAL, "bl_dev_gate: gate id %d is not a bl_gate (0..%d)", gate, BL_GATE_COUNT - 1);
    const struct op_shape *g = &gate_shapes[gate];
    int32_t rc = check_wires(d, "bl_dev_gate", "gate", g->name, wires, n_wires, g->wires);
    if (rc) return rc;
    if (n_params != g->params)
        return bl__fail(BL_EINVAL, "bl_dev_gate: gate %s takes %u parameter%s, got %u", g->name, g->params,
                        g->params == 1 ? "" : "s", n_params);
    if (n_params && !params) return bl__fail(BL_EINVAL, "bl_dev_gate: gate %s: params is NULL", g->name);
    for (uint32_t i = 0; i < n_params; ++i)
        if (!isfinite(params[i]))
            return bl__fail(BL_EINVAL, "bl_dev_gate: gate %s: parameter %u is not finite", g->name, i);
    rc = d->api->gate(d->impl, gate, wires, n_wires, params, n_params);
    if (BL_UNLIKELY(rc != BL_OK)) {
        char what[160];
        if (n_params)
            snprintf(what, sizeof what, "gate %s(%.10g) on wire %u", g->name, params[0], wires[0]);
        else if (n_wires == 2)
            snprintf(what, sizeof what, "gate %s on wires %u, %u", g->name, wires[0], wires[1]);
        else
            snprintf(what, sizeof what, "gate %s on wire %u", g->name, wires[0]);
        return hook_failed(d, rc, what);
    }
    d->ops++;
    return BL_OK;
}

BL_API int32_t bl_dev_gate1(bl_device *d, int32_t gate, uint32_t wire) {
    return bl_dev_gate(d, gate, &wire, 1, NULL, 0);
}

BL_API int32_t bl_dev_gate2(bl_device *d, int32_t gate, uint32_t wire0, uint32_t wire1) {
    uint32_t wires[2] = {wire0, wire1};
    return bl_dev_gate(d, gate, wires, 2, NULL, 0);
}

BL_API int32_t bl_dev_rotation(bl_device *d, int32_t gate, uint32_t wire, double angle) {
    return bl_dev_gate(d, gate, &wire, 1, &angle, 1);
}

BL_API int32_t bl_dev_measure(bl_device *d, uint32_t wire) {
    CHECK_DEVICE(d, "bl_dev_measure");
    if (wire >= d->num_qubits)
        return bl__fail(BL_EINVAL, "bl_dev_measure: wire %u is out of range (device '%s' has %u qubits: 0..%u)", wire,
                        dev_name(d), d->num_qubits, d->num_qubits - 1);
    int32_t outcome = -1;
    int32_t rc = d->api->measure(d->impl, wire, &outcome);
    if (BL_UNLIKELY(rc != BL_OK)) {
        char what[64];
        snprintf(what, sizeof what, "measure on wire %u", wire);
        return hook_failed(d, rc, what);
    }
    if (BL_UNLIKELY(outcome != 0 && outcome != 1))
        return bl__fail(BL_EBACKEND, "device '%s': measure on wire %u gave outcome %d, not 0 or 1", dev_name(d), wire,
                        outcome);
    d->ops++;
    return outcome;
}

BL_API int32_t bl_dev_reset(bl_device *d, uint32_t wire) {
    CHECK_DEVICE(d, "bl_dev_reset");
    if (wire >= d->num_qubits)
        return bl__fail(BL_EINVAL, "bl_dev_reset: wire %u is out of range (device '%s' has %u qubits: 0..%u)", wire,
                        dev_name(d), d->num_qubits, d->num_qubits - 1);
    int32_t rc = d->api->reset(d->impl, wire);
    if (BL_UNLIKELY(rc != BL_OK)) {
        char what[64];
        snprintf(what, sizeof what, "reset on wire %u", wire);
        return hook_failed(d, rc, what);
    }
    d->ops++;
    return BL_OK;
}

/* A noiseless device (noise hook NULL) accepts valid channels, does nothing, and still
 * counts them, so op counts do not depend on the device. */
BL_API int32_t bl_dev_noise(bl_device *d, int32_t channel, const uint32_t *wires, uint32_t n_wires, double p) {
    CHECK_DEVICE(d, "bl_dev_noise");
    if (channel < 0 || channel >= BL_NOISE_COUNT)
        return bl__fail(BL_EINVAL, "bl_dev_noise: channel id %d is not a bl_noise (0..%d)", channel,
                        BL_NOISE_COUNT - 1);
    const struct op_shape *c = &noise_shapes[channel];
    int32_t rc = check_wires(d, "bl_dev_noise", "channel", c->name, wires, n_wires, c->wires);
    if (rc) return rc;
    if (!(p >= 0.0 && p <= 1.0))
        return bl__fail(BL_EINVAL, "bl_dev_noise: channel %s: probability %g is not in [0, 1]", c->name, p);
    if (d->api->noise) {
        rc = d->api->noise(d->impl, channel, wires, n_wires, p);
        if (BL_UNLIKELY(rc != BL_OK)) {
            char what[96];
            snprintf(what, sizeof what, "noise channel %s(p=%g) on wire %u", c->name, p, wires[0]);
            return hook_failed(d, rc, what);
        }
    }
    d->ops++;
    return BL_OK;
}

/* Starts a new shot; not counted as an operation. */
BL_API int32_t bl_dev_reset_all(bl_device *d) {
    CHECK_DEVICE(d, "bl_dev_reset_all");
    int32_t rc = d->api->reset_all(d->impl);
    if (BL_UNLIKELY(rc != BL_OK)) return hook_failed(d, rc, "reset_all");
    return BL_OK;
}

BL_API int32_t bl_dev_apply_mask(bl_device *d, int32_t gate, uint32_t first_wire, const uint8_t *mask,
                                 uint32_t nbits) {
    CHECK_DEVICE(d, "bl_dev_apply_mask");
    if (gate != BL_GATE_X && gate != BL_GATE_Z)
        return bl__fail(BL_EINVAL, "bl_dev_apply_mask: gate id %d must be X (%d) or Z (%d)", gate, BL_GATE_X,
                        BL_GATE_Z);
    if (nbits && !mask) return bl__fail(BL_EINVAL, "bl_dev_apply_mask: mask is NULL");
    if (nbits && ((uint64_t)first_wire + nbits > d->num_qubits))
        return bl__fail(BL_EINVAL, "bl_dev_apply_mask: wires %u..%u are out of range (device '%s' has %u qubits: 0..%u)",
                        first_wire, first_wire + nbits - 1, dev_name(d), d->num_qubits, d->num_qubits - 1);
    for (uint32_t q = 0; q < nbits; ++q) {
        if (!((mask[q / 8] >> (q % 8)) & 1u)) continue;
        int32_t rc = bl_dev_gate1(d, gate, first_wire + q);
        if (rc != BL_OK) return rc;
    }
    return BL_OK;
}

BL_API uint32_t bl_dev_num_qubits(const bl_device *d) { return valid(d) ? d->num_qubits : 0; }

BL_API uint64_t bl_dev_op_count(const bl_device *d) { return valid(d) ? d->ops : 0; }

BL_API int32_t bl_dev_close(bl_device *d) {
    if (!d) return BL_OK;
    CHECK_DEVICE(d, "bl_dev_close");
    d->api->destroy(d->impl);
    void *dl = d->dl;
    d->magic = 0;
    free(d);
    if (dl) dlclose(dl);
    return BL_OK;
}
