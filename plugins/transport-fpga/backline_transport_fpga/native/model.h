/*
 * model.h -- the engine model's entry (libbackline_hwhs_model), run by `backline fpga model`.
 * Plain declarations: cffi reads this file.
 */
#ifndef BACKLINE_FPGA_MODEL_H
#define BACKLINE_FPGA_MODEL_H

#include <stdint.h>

typedef struct hwhs_model_config {
    const char *window;    /* path of the window file to create (mode 0600; an existing one is refused) */
    const char *device;    /* verbs device ("" or NULL: the first with an active port; none: the ERNIC part
                              reports every QP enable and MR registration as failed, with the reason) */
    int32_t ib_port;       /* 0: the device's first active port */
    int32_t gid_index;     /* -1: the first RoCE v2 GID with an IPv4-mapped address */
    uint64_t mem_bytes;    /* DMA memory */
    int32_t cpu;           /* pin the model's thread to this CPU; -1: not pinned */
    int32_t parent_pid;    /* stop when this process is gone; 0: no parent */
} hwhs_model_config;

/* Create the window, print "ready PATH pid N" on stdout, run until SIGTERM/SIGINT or the
 * parent's death, remove the window. 0, or a negative bl_status with the reason in err. */
int32_t hwhs_model_run(const hwhs_model_config *c, char *err, uint64_t errlen);

#endif
