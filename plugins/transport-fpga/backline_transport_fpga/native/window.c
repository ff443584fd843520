/*
 * window.c -- map the engine model's window file (window.h). The checks are those of a device
 * another user must not be able to drive: the file must be this user's and private (0600, as
 * the model creates it), a regular file (no symbolic link followed), and the model's.
 */
#define _GNU_SOURCE
#include "window.h"

#include <backline/sdk/oob.h> /* bl_oob_fail: the error helper of the backend library this is part of */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The open (and locked) file of each mapping, closed at unmap. */
#define MAX_MAPS 64
static struct {
    void *base;
    int fd;
} maps[MAX_MAPS];
static pthread_mutex_t maps_mu = PTHREAD_MUTEX_INITIALIZER;

static void keep_fd(void *base, int fd) {
    pthread_mutex_lock(&maps_mu);
    for (int i = 0; i < MAX_MAPS; ++i)
        if (!maps[i].base) {
            maps[i].base = base;
            maps[i].fd = fd;
            fd = -1;
            break;
        }
    pthread_mutex_unlock(&maps_mu);
    if (fd >= 0) close(fd); /* no room: the mapping stays, its lock goes */
}

static uint64_t get_le(const uint8_t *p, unsigned bytes) {
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; ++i) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int32_t hwhs_window_map(const char *path, hwhs_window *w, void **base, size_t *bytes, char *err, size_t n) {
    *base = NULL;
    *bytes = 0;
    if (!path || !*path) return bl_oob_fail(err, n, BL_EINVAL, "window=: give the engine's window file");
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return bl_oob_fail(err, n, BL_ENOTFOUND, "window=%s: no such file; start the engine model (backline fpga model "
                        "--window %s) or, on a board, give the engine's device", path, path);
        if (e == ELOOP)
            return bl_oob_fail(err, n, BL_EINVAL, "window=%s is a symbolic link: refusing a window another user could "
                        "control; give the model's file itself", path);
        return bl_oob_fail(err, n, e == EACCES || e == EPERM ? BL_EINVAL : BL_EBACKEND, "window=%s: %s", path, strerror(e));
    }
    int32_t rc;
    struct stat st;
    if (fstat(fd, &st)) {
        rc = bl_oob_fail(err, n, BL_EBACKEND, "window=%s: fstat: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = bl_oob_fail(err, n, BL_EINVAL, "window=%s is not a regular file: the engine model's window is one (a board's "
                  "engine is not mapped through this key)", path);
        goto out;
    }
    if (st.st_uid != geteuid()) {
        rc = bl_oob_fail(err, n, BL_EINVAL, "window=%s is owned by uid %u, not this user (uid %u): refusing a window another "
                  "user could control", path, (unsigned)st.st_uid, (unsigned)geteuid());
        goto out;
    }
    if (st.st_mode & 077) {
        rc = bl_oob_fail(err, n, BL_EINVAL, "window=%s is open to group or others (mode %04o): refusing a window another user "
                  "could control (the model creates it 0600)", path, (unsigned)(st.st_mode & 07777));
        goto out;
    }
    if ((uint64_t)st.st_size < HWHS_WIN_MEM) {
        rc = bl_oob_fail(err, n, BL_EINVAL, "window=%s has %lld bytes, too few for an engine model's window (at least %u "
                  "before its DMA memory)", path, (long long)st.st_size, (unsigned)HWHS_WIN_MEM);
        goto out;
    }
    uint8_t info[16];
    if (pread(fd, info, sizeof info, HWHS_WIN_INFO) != (ssize_t)sizeof info) {
        rc = bl_oob_fail(err, n, BL_EBACKEND, "window=%s: cannot read its information block", path);
        goto out;
    }
    uint32_t magic = (uint32_t)get_le(info + HWHS_INFO_MAGIC, 4);
    uint64_t mem_bytes = get_le(info + HWHS_INFO_MEM_BYTES, 8);
    if (magic == 0) {
        rc = bl_oob_fail(err, n, BL_ENOTFOUND, "window=%s: the engine model has not finished starting (no magic yet); wait "
                  "for its ready line", path);
        goto out;
    }
    if (magic != HWHS_MAGIC) {
        rc = bl_oob_fail(err, n, BL_EINVAL, "the window at %s is not an engine model's (magic 0x%08x, not 0x%08x)", path, magic,
                  (unsigned)HWHS_MAGIC);
        goto out;
    }
    if (!mem_bytes || mem_bytes > (uint64_t)st.st_size - HWHS_WIN_MEM) {
        rc = bl_oob_fail(err, n, BL_EINVAL, "window=%s has %lld bytes, but its model says it holds %llu bytes of DMA memory "
                  "after offset %u", path, (long long)st.st_size, (unsigned long long)mem_bytes, (unsigned)HWHS_WIN_MEM);
        goto out;
    }
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        int e = errno;
        rc = e == EWOULDBLOCK
                 ? bl_oob_fail(err, n, BL_EBUSY, "window=%s is in use by another controller session: the engine serves one "
                        "at a time (close the other, or start another model with its own --window)", path)
                 : bl_oob_fail(err, n, BL_EBACKEND, "window=%s: flock: %s", path, strerror(e));
        goto out;
    }
    size_t len = (size_t)(HWHS_WIN_MEM + mem_bytes);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        rc = bl_oob_fail(err, n, BL_EBACKEND, "window=%s: mmap of %zu bytes: %s", path, len, strerror(errno));
        goto out;
    }
    uint8_t *b = p;
    memset(w, 0, sizeof *w);
    w->regs = b + HWHS_WIN_REGS;
    w->ernic = b + HWHS_WIN_ERNIC;
    w->table = b + HWHS_WIN_TABLE;
    w->trace = (const volatile uint16_t *)(b + HWHS_WIN_TRACE);
    w->info = b + HWHS_WIN_INFO;
    w->mem = b + HWHS_WIN_MEM;
    w->mem_bus = HWHS_MEM_BUS_BASE;
    w->mem_bytes = mem_bytes;
    *base = p;
    *bytes = len;
    keep_fd(p, fd);
    return BL_OK;
out:
    close(fd);
    return rc;
}

void hwhs_window_unmap(void *base, size_t bytes) {
    if (!base) return;
    munmap(base, bytes);
    int fd = -1;
    pthread_mutex_lock(&maps_mu);
    for (int i = 0; i < MAX_MAPS; ++i)
        if (maps[i].base == base) {
            fd = maps[i].fd;
            maps[i].base = NULL;
            break;
        }
    pthread_mutex_unlock(&maps_mu);
    if (fd >= 0) close(fd); /* releases the lock */
}
