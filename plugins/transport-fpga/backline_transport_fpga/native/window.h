/*
 * window.h -- the engine model's window file as the driver's hwhs_window: map it (checking that
 * it is this user's, private, large enough and the model's) and unmap it. A board's window is a
 * different function (the hwhs and ERNIC devices' mmaps and a u-dma-buf), not this one.
 */
#ifndef BACKLINE_FPGA_WINDOW_H
#define BACKLINE_FPGA_WINDOW_H

#include "driver.h"

#include <stddef.h>
#include <stdint.h>

/* The window `backline fpga model` creates when given none (the backend's default `window`). */
#define HWHS_DEFAULT_WINDOW "/dev/shm/backline-hwhs-0"

/* Map the model's window at `path` (shared, read-write) into *w; *base and *bytes are the mapping
 * for hwhs_window_unmap. The file must be a regular file of this user's with no group or other
 * access, hold the model's magic and be large enough for its DMA memory. It is locked (flock,
 * exclusive) until unmapped: one engine, one controller session at a time (BL_EBUSY otherwise).
 * A missing file is BL_ENOTFOUND. */
int32_t hwhs_window_map(const char *path, hwhs_window *w, void **base, size_t *bytes, char *err, size_t n);
/* Unmap what hwhs_window_map mapped and release its lock. */
void hwhs_window_unmap(void *base, size_t bytes);

#endif
