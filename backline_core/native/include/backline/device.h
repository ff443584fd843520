/*
 * device.h -- the quantum-device runtime ABI: what a compiled quantum program calls.
 *
 * A device runtime is a plugin (entry-point group backline.devices). It hands the core a
 * bl_device_api vtable, either exported from a shared library as BL_DEVICE_ENTRY or built
 * in process (a Python device fills the table with cffi callbacks). Compiled code never
 * calls the vtable directly: it calls the bl_dev_* functions of libbackline below, which
 * check arguments, keep the error text, and count operations.
 *
 * Qubits are numbered 0..num_qubits-1 ("wires"). Every call returns a bl_status.
 */
#ifndef BACKLINE_DEVICE_H
#define BACKLINE_DEVICE_H

#include "backline.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BL_DEVICE_ABI_VERSION 1

/* Gates, with their wire and parameter counts (see bl_dev_gate). */
typedef enum bl_gate {
    BL_GATE_I = 0,    /* 1 wire */
    BL_GATE_X = 1,    /* 1 wire */
    BL_GATE_Y = 2,    /* 1 wire */
    BL_GATE_Z = 3,    /* 1 wire */
    BL_GATE_H = 4,    /* 1 wire */
    BL_GATE_S = 5,    /* 1 wire */
    BL_GATE_SDG = 6,  /* 1 wire: S^dagger */
    BL_GATE_SX = 7,   /* 1 wire: sqrt(X) */
    BL_GATE_CNOT = 8, /* 2 wires: control, target */
    BL_GATE_CZ = 9,   /* 2 wires */
    BL_GATE_SWAP = 10,/* 2 wires */
    BL_GATE_RX = 11,  /* 1 wire, 1 parameter (angle) */
    BL_GATE_RY = 12,  /* 1 wire, 1 parameter */
    BL_GATE_RZ = 13,  /* 1 wire, 1 parameter */
    BL_GATE_COUNT = 14
} bl_gate;

/* Noise channels (see bl_dev_noise): p is the probability of the error. */
typedef enum bl_noise {
    BL_NOISE_X_FLIP = 0,       /* X with probability p; 1 wire */
    BL_NOISE_Z_FLIP = 1,       /* Z with probability p; 1 wire */
    BL_NOISE_Y_FLIP = 2,       /* Y with probability p; 1 wire */
    BL_NOISE_DEPOLARIZE1 = 3,  /* X, Y or Z each with p/3; 1 wire */
    BL_NOISE_DEPOLARIZE2 = 4,  /* one of the 15 non-identity two-qubit Paulis each with p/15; 2 wires */
    BL_NOISE_COUNT = 5
} bl_noise;

/* What a device implements. A hook may be NULL only where noted. */
typedef struct bl_device_api {
    uint32_t abi_version; /* BL_DEVICE_ABI_VERSION */
    const char *name;
    /* Build a device of num_qubits qubits in |0...0>; `config` is "k=v;k=v"; `seed` makes
     * sampling reproducible (0: seed from the OS). */
    int32_t (*create)(const char *config, uint32_t num_qubits, uint64_t seed, void **dev, char *err,
                      size_t errlen);
    int32_t (*gate)(void *dev, int32_t gate, const uint32_t *wires, uint32_t n_wires, const double *params,
                    uint32_t n_params);
    /* Measure `wire` in the Z basis (the state collapses); *outcome is 0 or 1. */
    int32_t (*measure)(void *dev, uint32_t wire, int32_t *outcome);
    /* Put `wire` in |0>. */
    int32_t (*reset)(void *dev, uint32_t wire);
    /* Apply a noise channel; NULL for a noiseless device (bl_dev_noise then does nothing). */
    int32_t (*noise)(void *dev, int32_t channel, const uint32_t *wires, uint32_t n_wires, double p);
    /* Start a new shot: every qubit back to |0>. */
    int32_t (*reset_all)(void *dev);
    void (*destroy)(void *dev);
} bl_device_api;

#define BL_DEVICE_ENTRY "backline_device_v1"
typedef const bl_device_api *(*bl_device_entry_fn)(void);

typedef struct bl_device bl_device;

/* Open a device from a shared library exporting BL_DEVICE_ENTRY, or (library == NULL)
 * from an in-process vtable `api`. */
BL_API int32_t bl_dev_open(const char *library, const bl_device_api *api, const char *config,
                           uint32_t num_qubits, uint64_t seed, bl_device **out);
BL_API int32_t bl_dev_gate(bl_device *d, int32_t gate, const uint32_t *wires, uint32_t n_wires,
                           const double *params, uint32_t n_params);
/* Shorthands compiled code uses (no arrays to build). */
BL_API int32_t bl_dev_gate1(bl_device *d, int32_t gate, uint32_t wire);
BL_API int32_t bl_dev_gate2(bl_device *d, int32_t gate, uint32_t wire0, uint32_t wire1);
BL_API int32_t bl_dev_rotation(bl_device *d, int32_t gate, uint32_t wire, double angle);
/* Returns 0 or 1, or a negative status. */
BL_API int32_t bl_dev_measure(bl_device *d, uint32_t wire);
BL_API int32_t bl_dev_reset(bl_device *d, uint32_t wire);
BL_API int32_t bl_dev_noise(bl_device *d, int32_t channel, const uint32_t *wires, uint32_t n_wires, double p);
BL_API int32_t bl_dev_reset_all(bl_device *d);
/* Apply the single-qubit `gate` (BL_GATE_X or BL_GATE_Z; anything else is BL_EINVAL) to wire
 * first_wire + q for every set bit q < nbits of the bit-packed mask (bit q in byte q / 8 at
 * bit q % 8, least significant first) -- a decoder's correction. Each applied gate counts as
 * one operation; stops at the first failure. */
BL_API int32_t bl_dev_apply_mask(bl_device *d, int32_t gate, uint32_t first_wire, const uint8_t *mask,
                                 uint32_t nbits);
BL_API uint32_t bl_dev_num_qubits(const bl_device *d);
/* Operations applied since open: gates, measurements, resets, noise channels. */
BL_API uint64_t bl_dev_op_count(const bl_device *d);
BL_API int32_t bl_dev_close(bl_device *d);

#ifdef __cplusplus
}
#endif
#endif /* BACKLINE_DEVICE_H */
