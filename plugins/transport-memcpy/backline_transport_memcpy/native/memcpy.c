/*
 * memcpy transport backend: the two roles share one region holding a control block,
 * the request ring and the reply ring. The coprocessor owns the region; the controller
 * finds it by session key. Where the coprocessor runs is the placement's runs_in:
 *
 *   controller-thread  region in this process; the controller runs the coprocessor
 *                      function itself at post time (the deliver hook);
 *   thread             region in this process; a poller thread answers;
 *   process            region is a file <dir>/<key> on the shm tmpfs, mapped by both
 *                      sides; the coprocessor runs in another process (e.g.
 *                      `backline coprocessor serve`).
 *
 * A controller looks for its key in this process first, then in shared memory, so it
 * needs no runs_in of its own (given one, it checks the coprocessor is there).
 *
 * Trust and liveness of a process segment (docs/wire-format.md, "memcpy control block"):
 *
 *   - <dir> is /dev/shm/backline-<euid> (or $BACKLINE_MEMCPY_DIR), a directory of this
 *     user's, mode 0700. Only its owner can add or replace names in it, so no other user
 *     can squat on a key or plant a segment; both sides refuse a directory that is a
 *     symlink, someone else's, or open to others, and a segment that is not a private
 *     regular file of this user's.
 *   - The coprocessor holds an open-file-description write lock on byte 0 of its
 *     segment for as long as it lives; the kernel drops it when the process dies, before
 *     it is a zombie. "Is the coprocessor alive" is "is byte 0 locked" (F_OFD_GETLK),
 *     never a pid: pids are reused, and kill(pid, 0) succeeds on a zombie.
 *   - A controller holds the same kind of lock on byte 1: one controller per key, freed
 *     by stop, close or death.
 *   - Whoever removes a stale segment (a new coprocessor, a controller) first takes the
 *     byte-0 lock on it, then checks the name still names that file: so of two
 *     reclaimers only one unlinks, and never a newer coprocessor's file.
 */
#define _GNU_SOURCE
#include <backline/backline.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#define REGION_MAGIC 0x4d454d4350593031ull /* "MEMCPY01" */
#define CTL_BYTES 384u

#define SEGMENT_ROOT "/dev/shm"          /* the shm tmpfs: segments are plain files there */
#define DIR_ENV "BACKLINE_MEMCPY_DIR"    /* override of the segment directory (tests, odd mounts) */
#define COPROC_LOCK_BYTE 0               /* held by the coprocessor for its whole life */
#define CTRL_LOCK_BYTE 1                 /* held by the one controller of the key */
/* A segment nobody has locked yet may be one a coprocessor created a moment ago (it
 * locks right after the O_EXCL create); only past this age is it a leftover. */
#define SETUP_GRACE_NS 2000000000ll
#define PATH_BYTES 512

/* Where the coprocessor runs: the placement's runs_in (bl_runs_in values). */
enum locality { LOC_INLINE = BL_RUNS_CONTROLLER_THREAD, LOC_THREAD = BL_RUNS_THREAD, LOC_PROCESS = BL_RUNS_PROCESS,
                LOC_ANY = BL_RUNS_ANY };
static const char *const locality_names[] = {"controller-thread", "thread", "process"};

/* Control block at the start of the region. Hot words sit on their own cache lines. */
struct ctl {
    uint64_t magic;
    uint32_t abi, slots, slot_bytes;
    int32_t locality;
    int32_t coproc_pid; /* for messages only; liveness is the byte-0 lock */
    uint32_t ready;
    uint64_t size;
    char key[128];
    uint64_t owner __attribute__((aligned(64))); /* controller claim: pid << 32 | token */
    uint32_t doorbell[2] __attribute__((aligned(64)));
} __attribute__((aligned(64)));

_Static_assert(sizeof(struct ctl) <= CTL_BYTES, "control block grew past CTL_BYTES");

/* In-process pairing table entry; refcounted so either side may go first. */
struct entry {
    char key[128];
    struct ctl *ctl;
    size_t size;
    int refs;
    int alive;           /* the coprocessor session is still open */
    bl_session *coproc;  /* for inline delivery */
    int cpu;             /* the CPU its poller thread is pinned to, or -1 */
    struct entry *next;
};

struct mc {
    int role, locality, want_locality, cpu;
    char key[128];
    bl_session *session;
    const bl_host_api *host;
    uint32_t slots, slot_bytes;
    struct ctl *ctl;
    size_t size;
    int dir_fd;           /* the segment directory, checked once when opened */
    int shm_fd;           /* the segment; its open file description carries this side's lock */
    int created;          /* coprocessor: this session created the segment's name */
    int shm_claimed;      /* controller: holds the byte-1 lock */
    int seen_unready;     /* controller: last look found a segment not (yet) served */
    dev_t shm_dev;        /* identity of the mapped segment, so a newer file of the same name is told apart */
    ino_t shm_ino;
    char dir_path[PATH_BYTES];
    char seg_path[PATH_BYTES + 160];
    struct entry *entry;
    uint64_t claim;
    pthread_t thread;
    int thread_running;
    int moved_off_cpu;    /* controller: its thread left the CPU of an in-process poller pinned there */
    pthread_t moved_thread;
    cpu_set_t saved_affinity;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *table;
static uint32_t claim_counter;

static const char *const config_keys[] = {"cpu", NULL};

static int32_t err_out(char *err, size_t n, int32_t rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int32_t err_out(char *err, size_t n, int32_t rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return rc;
}

static size_t region_size(uint32_t slots, uint32_t slot_bytes) {
    return CTL_BYTES + 2 * (size_t)slots * slot_bytes;
}

static uint8_t *ring(const struct mc *m, int which) {
    return (uint8_t *)m->ctl + CTL_BYTES + (size_t)which * m->slots * m->slot_bytes;
}

/* "uid 65534 (nobody)", or just the number when the name cannot be looked up. */
static void uid_text(uid_t uid, char *out, size_t n) {
    struct passwd pw, *found = NULL;
    char buf[4096];
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found)
        snprintf(out, n, "uid %u (%s)", (unsigned)uid, found->pw_name);
    else
        snprintf(out, n, "uid %u", (unsigned)uid);
}

static const char *file_kind(mode_t mode) {
    if (S_ISLNK(mode)) return "a symbolic link";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device node";
    if (S_ISREG(mode)) return "a regular file";
    return "not a regular file";
}

/* ---- open-file-description locks ---- */

static struct flock byte_lock(short type, off_t byte) {
    struct flock fl;
    memset(&fl, 0, sizeof fl); /* l_pid must be 0 for the OFD commands */
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = byte;
    fl.l_len = 1;
    return fl;
}

/* 1: another open file description holds `byte`; 0: nobody does; -1: cannot tell. */
static int lock_held(int fd, off_t byte) {
    struct flock fl = byte_lock(F_WRLCK, byte);
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return -1;
    return fl.l_type != F_UNLCK;
}

static int take_lock(int fd, off_t byte) {
    struct flock fl = byte_lock(F_WRLCK, byte);
    return fcntl(fd, F_OFD_SETLK, &fl);
}

static void drop_lock(int fd, off_t byte) {
    struct flock fl = byte_lock(F_UNLCK, byte);
    fcntl(fd, F_OFD_SETLK, &fl);
}

/* ---- the segment directory and its files ---- */

static int32_t segment_dir_path(struct mc *m, char *err, size_t n) {
    const char *env = getenv(DIR_ENV);
    if (env && *env) {
        size_t len = strlen(env);
        if (env[0] != '/')
            return err_out(err, n, BL_EINVAL, "%s=%s: must be an absolute path", DIR_ENV, env);
        if (len >= sizeof m->dir_path)
            return err_out(err, n, BL_EINVAL, "%s: path longer than %zu bytes", DIR_ENV, sizeof m->dir_path - 1);
        /* A trailing '/' would make the kernel follow a symlink despite O_NOFOLLOW. */
        while (len > 1 && env[len - 1] == '/') --len;
        snprintf(m->dir_path, sizeof m->dir_path, "%.*s", (int)len, env);
    } else {
        snprintf(m->dir_path, sizeof m->dir_path, SEGMENT_ROOT "/backline-%u", (unsigned)geteuid());
    }
    snprintf(m->seg_path, sizeof m->seg_path, "%s/%s", m->dir_path, m->key);
    return BL_OK;
}

/* Open the segment directory into m->dir_fd, refusing one another user could write to.
 * create=0 (controller): a missing directory is not an error, only "nothing served yet". */
static int32_t open_dir(struct mc *m, int create, char *err, size_t n) {
    const char *path = m->dir_path;
    int made = 0;
    if (m->dir_fd >= 0) close(m->dir_fd); /* an earlier look's, or a failed connect's */
    m->dir_fd = -1;
    if (create) {
        if (mkdir(path, 0700) == 0)
            made = 1;
        else if (errno != EEXIST)
            return err_out(err, n, BL_EBACKEND, "cannot create the segment directory %s: %s", path, strerror(errno));
    }
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        struct stat st;
        if (e == ENOENT && !create) return BL_OK;
        if ((e == ELOOP || e == ENOTDIR) && lstat(path, &st) == 0) {
            char who[192];
            uid_text(st.st_uid, who, sizeof who);
            return err_out(err, n, BL_EBACKEND,
                           "refusing the segment directory %s: it is %s (owned by %s), not a directory; whoever controls "
                           "it could read, replace or block this user's segments. Remove it (rm %s) and retry",
                           path, file_kind(st.st_mode), who, path);
        }
        return err_out(err, n, BL_EBACKEND, "cannot open the segment directory %s: %s", path, strerror(e));
    }
    if (made) fchmod(fd, 0700); /* mkdir's mode went through the umask */
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return err_out(err, n, BL_EBACKEND, "cannot stat the segment directory %s: %s", path, strerror(e));
    }
    if (st.st_uid != geteuid()) {
        char who[192], me[192];
        uid_text(st.st_uid, who, sizeof who);
        uid_text(geteuid(), me, sizeof me);
        close(fd);
        return err_out(err, n, BL_EBACKEND,
                       "refusing the segment directory %s: it belongs to %s, not to this user (%s), so its owner "
                       "could read, replace or block this user's segments. Remove it (as root: rm -r %s) and retry%s",
                       path, who, me, path, getenv(DIR_ENV) && *getenv(DIR_ENV) ? "" : ", or set " DIR_ENV " to a directory of your own");
    }
    if ((st.st_mode & 0777) != 0700) {
        close(fd);
        return err_out(err, n, BL_EBACKEND,
                       "refusing the segment directory %s: its mode is 0%03o, but it must be 0700 (drwx------) so that "
                       "no other user can add, replace or read segments in it. Check nothing in it is foreign, then "
                       "chmod 700 %s (or remove it)",
                       path, (unsigned)(st.st_mode & 0777), path);
    }
    m->dir_fd = fd;
    return BL_OK;
}

/* Why an existing name could not be opened as a segment. */
static int32_t refuse_open(const struct mc *m, int e, char *err, size_t n) {
    struct stat st;
    if ((e == ELOOP || e == EISDIR || e == ENXIO) && fstatat(m->dir_fd, m->key, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return err_out(err, n, BL_EBACKEND, "refusing %s: it is %s, not a shared-memory segment (a regular file); remove it",
                       m->seg_path, file_kind(st.st_mode));
    return err_out(err, n, BL_EBACKEND, "cannot open the segment %s: %s", m->seg_path, strerror(e));
}

/* A segment is trusted only if this user made it and nobody else can open it. */
static int32_t check_segment(const struct mc *m, int fd, struct stat *st, char *err, size_t n) {
    if (fstat(fd, st) != 0)
        return err_out(err, n, BL_EBACKEND, "cannot stat the segment %s: %s", m->seg_path, strerror(errno));
    if (!S_ISREG(st->st_mode))
        return err_out(err, n, BL_EBACKEND, "refusing %s: it is %s, not a shared-memory segment (a regular file); remove it",
                       m->seg_path, file_kind(st->st_mode));
    if (st->st_uid != geteuid()) {
        char who[192], me[192];
        uid_text(st->st_uid, who, sizeof who);
        uid_text(geteuid(), me, sizeof me);
        return err_out(err, n, BL_EBACKEND,
                       "refusing the segment %s: it belongs to %s, not to this user (%s); a segment is trusted only from "
                       "its own user. Remove it (rm %s) and restart the coprocessor of key '%s'",
                       m->seg_path, who, me, m->seg_path, m->key);
    }
    if (st->st_mode & 077)
        return err_out(err, n, BL_EBACKEND,
                       "refusing the segment %s: its mode is 0%03o, so other users may read or write it; a segment must "
                       "be 0600. Remove it (rm %s) and restart the coprocessor of key '%s'",
                       m->seg_path, (unsigned)(st->st_mode & 0777), m->seg_path, m->key);
    return BL_OK;
}

/* The control block's fields, copied out so that nothing is read from a mapping after
 * it is gone and nothing checked can change under the checker. */
struct header {
    uint64_t magic, size;
    uint32_t abi, slots, slot_bytes, ready;
    int32_t coproc_pid;
    char key[128]; /* NUL-terminated here, whatever the file holds */
};

static int read_header(int fd, const struct stat *st, struct header *h) {
    memset(h, 0, sizeof *h);
    if ((uint64_t)st->st_size < CTL_BYTES) return -1;
    struct ctl *c = mmap(NULL, CTL_BYTES, PROT_READ, MAP_SHARED, fd, 0);
    if (c == MAP_FAILED) return -1;
    /* ready and magic are published last (release): read them first. */
    h->ready = __atomic_load_n(&c->ready, __ATOMIC_ACQUIRE);
    h->magic = __atomic_load_n(&c->magic, __ATOMIC_ACQUIRE);
    h->abi = c->abi;
    h->slots = c->slots;
    h->slot_bytes = c->slot_bytes;
    h->size = c->size;
    h->coproc_pid = c->coproc_pid;
    memcpy(h->key, c->key, sizeof h->key - 1);
    munmap(c, CTL_BYTES);
    return 0;
}

/* A published control block this build can use, or BL_EABI saying what was found. */
static int32_t check_header(const struct mc *m, const struct header *h, const struct stat *st, char *err, size_t n) {
    if (h->magic != REGION_MAGIC)
        return err_out(err, n, BL_EABI,
                       "%s is not a memcpy segment (magic 0x%016llx, expected 0x%016llx); remove it and restart the "
                       "coprocessor of key '%s'", m->seg_path, (unsigned long long)h->magic, REGION_MAGIC, m->key);
    if (h->abi != BACKLINE_ABI_VERSION)
        return err_out(err, n, BL_EABI,
                       "%s was made by a coprocessor built for Backline ABI %u, but this controller is ABI %d; run both "
                       "sides from the same backline-core (restart that coprocessor with this one)",
                       m->seg_path, h->abi, BACKLINE_ABI_VERSION);
    if (!h->slots || h->slots > BL_MAX_SLOTS || (h->slots & (h->slots - 1)) || h->slot_bytes < BL_SLOT_ALIGN ||
        h->slot_bytes % BL_SLOT_ALIGN || h->slot_bytes > BL_MAX_SLOT_BYTES)
        return err_out(err, n, BL_EABI,
                       "%s has an impossible ring geometry (slots=%u, slot_bytes=%u); it was not made by this memcpy "
                       "backend: remove it and restart the coprocessor of key '%s'", m->seg_path, h->slots, h->slot_bytes, m->key);
    size_t want = region_size(h->slots, h->slot_bytes);
    if (h->size != want || (uint64_t)st->st_size != want)
        return err_out(err, n, BL_EABI,
                       "%s is %lld bytes and its control block says %llu, but slots=%u x slot_bytes=%u needs %zu; it was "
                       "not made by this memcpy backend (or was cut short): stop its coprocessor, remove it and restart",
                       m->seg_path, (long long)st->st_size, (unsigned long long)h->size, h->slots, h->slot_bytes, want);
    return BL_OK;
}

static int same_segment(const struct mc *m, const struct stat *mine) {
    struct stat st;
    return fstatat(m->dir_fd, m->key, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == mine->st_dev &&
           st.st_ino == mine->st_ino;
}

/* Whether the header is one a memcpy coprocessor of this key wrote: the key, and this build's
 * magic and ABI, or (a coprocessor that died during its set-up) no magic yet but its pid, which
 * it writes with the key right after its O_EXCL create. Anything else -- a file someone put
 * under the key's name -- is not ours to remove, except an empty one (a coprocessor that died
 * between its create and its lock leaves that, and removing it loses nothing). */
static int segment_of_key(const struct mc *m, const struct header *h) {
    if (strncmp(h->key, m->key, sizeof h->key) != 0) return 0;
    if (h->magic == REGION_MAGIC) return h->abi == BACKLINE_ABI_VERSION;
    return h->magic == 0 && h->coproc_pid > 0;
}

/* Unlink the segment open on fd, whose coprocessor is gone (see the top of the file): only a
 * segment of this key (its header), only while the name still names that file (dev, inode).
 * The name is in this user's private directory, so only this user can swap it in between. */
static void reclaim(const struct mc *m, int fd) {
    struct stat st;
    struct header h;
    if (take_lock(fd, COPROC_LOCK_BYTE) != 0) return; /* held after all, or another reclaimer's */
    if (fstat(fd, &st) == 0 && (st.st_size == 0 || (read_header(fd, &st, &h) == 0 && segment_of_key(m, &h))) &&
        same_segment(m, &st))
        unlinkat(m->dir_fd, m->key, 0);
    drop_lock(fd, COPROC_LOCK_BYTE);
}

/* Since the file was created or last sized (a chmod or chown does not make it young). */
static int64_t age_ns(const struct stat *st) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)(now.tv_sec - st->st_mtim.tv_sec) * 1000000000ll + (now.tv_nsec - st->st_mtim.tv_nsec);
}

/* ---- config ---- */

static int32_t read_config(struct mc *m, const bl_open_args *a, char *err, size_t n) {
    int64_t cpu = -1;
    int32_t rc = a->host->config_int(a->session, "cpu", 0, INT_MAX, -1, &cpu, err, n);
    if (rc) return rc;
    if (cpu >= get_nprocs_conf())
        return err_out(err, n, BL_EINVAL, "cpu=%lld: not a CPU of this machine (it has CPUs 0 to %d)", (long long)cpu,
                       get_nprocs_conf() - 1);
    m->cpu = (int)cpu;
    if (m->cpu >= 0 && m->role == BL_CONTROLLER)
        return err_out(err, n, BL_EINVAL, "cpu=%d: pins a coprocessor's poller thread; a controller has none (drop the key)", m->cpu);
    m->want_locality = a->runs_in == BL_RUNS_ANY ? LOC_ANY : a->runs_in;
    if (m->role == BL_COPROCESSOR) m->locality = m->want_locality;
    if (m->cpu >= 0 && m->locality == LOC_INLINE)
        return err_out(err, n, BL_EINVAL, "cpu=%d: a coprocessor that runs in the controller's thread has no thread to pin", m->cpu);
    return BL_OK;
}

static int32_t mc_open(const bl_open_args *a, void **impl, char *err, size_t n) {
    struct mc *m = calloc(1, sizeof *m);
    if (!m) return err_out(err, n, BL_ENOMEM, "out of memory");
    m->role = a->role;
    m->session = a->session;
    m->host = a->host;
    m->slots = a->slots;
    m->slot_bytes = a->slot_bytes;
    m->shm_fd = -1;
    m->dir_fd = -1;
    snprintf(m->key, sizeof m->key, "%s", a->key);
    int32_t rc = read_config(m, a, err, n);
    if (rc) {
        free(m);
        return rc;
    }
    *impl = m;
    return BL_OK;
}

/* ---- coprocessor side ---- */

static void init_ctl(struct mc *m) {
    struct ctl *c = m->ctl;
    c->abi = BACKLINE_ABI_VERSION;
    c->slots = m->slots;
    c->slot_bytes = m->slot_bytes;
    c->locality = m->locality;
    c->coproc_pid = getpid();
    c->size = m->size;
    snprintf(c->key, sizeof c->key, "%s", m->key);
    __atomic_store_n(&c->magic, REGION_MAGIC, __ATOMIC_RELEASE);
}

static int32_t coproc_connect_in_process(struct mc *m, char *err, size_t n) {
    pthread_mutex_lock(&table_lock);
    for (struct entry *e = table; e; e = e->next)
        if (e->alive && !strcmp(e->key, m->key)) {
            pthread_mutex_unlock(&table_lock);
            return err_out(err, n, BL_EBUSY, "a coprocessor already serves key '%s' in this process", m->key);
        }
    struct entry *e = calloc(1, sizeof *e);
    if (!e) {
        pthread_mutex_unlock(&table_lock);
        return err_out(err, n, BL_ENOMEM, "out of memory");
    }
    snprintf(e->key, sizeof e->key, "%s", m->key);
    e->refs = 1;
    e->alive = 1;
    e->coproc = m->session;
    e->cpu = m->cpu;
    e->next = table;
    table = e;
    m->entry = e;
    pthread_mutex_unlock(&table_lock);
    return BL_OK;
}

/* Make the segment this coprocessor just created (fd, O_EXCL) its own: lock, size, map. */
static int32_t own_segment(struct mc *m, int fd, char *err, size_t n) {
    if (take_lock(fd, COPROC_LOCK_BYTE) != 0) {
        int e = errno;
        close(fd);
        return err_out(err, n, BL_EBUSY, "cannot lock the segment %s this coprocessor just created (%s); another process "
                       "is reclaiming it: retry", m->seg_path, strerror(e));
    }
    int32_t rc = BL_OK;
    struct stat st;
    void *p = MAP_FAILED;
    fchmod(fd, 0600); /* the create mode went through the umask; the controller needs read and write */
    if (ftruncate(fd, (off_t)m->size) != 0)
        rc = err_out(err, n, BL_ENOMEM, "cannot size the segment %s to %zu bytes: %s", m->seg_path, m->size, strerror(errno));
    else if ((p = mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
        rc = err_out(err, n, BL_ENOMEM, "mmap of %s (%zu bytes): %s", m->seg_path, m->size, strerror(errno));
    else if (fstat(fd, &st) != 0)
        rc = err_out(err, n, BL_EBACKEND, "cannot stat the segment %s: %s", m->seg_path, strerror(errno));
    if (rc) {
        if (p != MAP_FAILED) munmap(p, m->size);
        struct stat mine;
        if (fstat(fd, &mine) == 0 && same_segment(m, &mine)) unlinkat(m->dir_fd, m->key, 0); /* still the file we made */
        close(fd);
        return rc;
    }
    m->ctl = p;
    m->shm_fd = fd;
    m->shm_dev = st.st_dev;
    m->shm_ino = st.st_ino;
    m->created = 1;
    /* Written only under the lock: an unlocked segment carrying a pid and this key is a dead
     * coprocessor's (segment_of_key), which may be reclaimed; any other file of this name is not
     * (bar an empty one, a death between create and lock, which holds nothing to lose). */
    snprintf(m->ctl->key, sizeof m->ctl->key, "%s", m->key);
    m->ctl->coproc_pid = getpid();
    return BL_OK;
}

/* The name exists: BL_OK when it was a leftover, now removed (create again), else why not. */
static int32_t inspect_existing(struct mc *m, char *err, size_t n) {
    int fd = openat(m->dir_fd, m->key, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return errno == ENOENT ? BL_OK : refuse_open(m, errno, err, n);
    struct stat st;
    struct header h;
    int32_t rc = check_segment(m, fd, &st, err, n);
    if (rc) {
        close(fd);
        return rc;
    }
    int have = read_header(fd, &st, &h) == 0;
    int held = lock_held(fd, COPROC_LOCK_BYTE);
    if (held != 0) {
        close(fd);
        if (have && h.coproc_pid > 0)
            return err_out(err, n, BL_EBUSY, "key '%s' is already served by coprocessor pid %d (segment %s)", m->key,
                           (int)h.coproc_pid, m->seg_path);
        return err_out(err, n, BL_EBUSY, "key '%s' is being set up by another coprocessor (segment %s); retry, or stop that one",
                       m->key, m->seg_path);
    }
    if (have && h.magic && (h.magic != REGION_MAGIC || h.abi != BACKLINE_ABI_VERSION)) {
        close(fd); /* another build's segment: its liveness rule may not be ours, so leave it */
        return err_out(err, n, BL_EABI,
                       "the segment %s of key '%s' was made by another build (magic 0x%016llx, ABI %u; this is ABI %d); "
                       "if no such coprocessor is running, remove it (rm %s)",
                       m->seg_path, m->key, (unsigned long long)h.magic, h.abi, BACKLINE_ABI_VERSION, m->seg_path);
    }
    if (!(have && h.coproc_pid != 0) && age_ns(&st) < SETUP_GRACE_NS) {
        close(fd); /* most likely a coprocessor between its create and its lock */
        return err_out(err, n, BL_EBUSY, "key '%s' is being set up by another coprocessor (segment %s is not locked yet); retry",
                       m->key, m->seg_path);
    }
    if (st.st_size != 0 && (!have || !segment_of_key(m, &h))) {
        close(fd); /* someone's file under the key's name: never ours to unlink */
        return err_out(err, n, BL_EBUSY,
                       "%s carries key '%s' as its name but is not a memcpy segment of that key (%s); it was left as it "
                       "is. Remove it if nobody needs it, or use another key",
                       m->seg_path, m->key, !have ? "it is shorter than a control block" : "no segment header of this key");
    }
    reclaim(m, fd);
    close(fd);
    return BL_OK;
}

static int32_t coproc_connect(struct mc *m, char *err, size_t n) {
    m->size = region_size(m->slots, m->slot_bytes);
    if (m->locality != LOC_PROCESS) return coproc_connect_in_process(m, err, n);
    int32_t rc = segment_dir_path(m, err, n);
    if (!rc) rc = open_dir(m, 1, err, n);
    if (rc) return rc;
    for (int attempt = 0; attempt < 4; ++attempt) {
        int fd = openat(m->dir_fd, m->key, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) return own_segment(m, fd, err, n);
        if (errno != EEXIST)
            return err_out(err, n, BL_EBACKEND, "cannot create the segment %s: %s", m->seg_path, strerror(errno));
        rc = inspect_existing(m, err, n);
        if (rc) return rc;
    }
    return err_out(err, n, BL_EBUSY, "cannot create the segment %s: it keeps reappearing", m->seg_path);
}

static int32_t coproc_alloc(struct mc *m, char *err, size_t n) {
    if (m->locality == LOC_PROCESS) return BL_OK; /* mapped at connect; zero-filled by ftruncate */
    void *p = aligned_alloc(4096, (m->size + 4095) & ~(size_t)4095);
    if (!p) return err_out(err, n, BL_ENOMEM, "cannot allocate %zu bytes of ring memory", m->size);
    memset(p, 0, m->size);
    m->ctl = p;
    pthread_mutex_lock(&table_lock);
    m->entry->ctl = m->ctl;
    m->entry->size = m->size;
    pthread_mutex_unlock(&table_lock);
    return BL_OK;
}

static void *poller(void *arg) {
    struct mc *m = arg;
    m->host->serve(m->session);
    return NULL;
}

/* ---- controller side ---- */

static void release_entry(struct mc *m);

static struct entry *find_entry(const char *key) {
    for (struct entry *e = table; e; e = e->next)
        if (e->alive && !strcmp(e->key, key)) return e;
    return NULL;
}

/* In this process every claimant is this process, so the claim word alone decides. */
static int32_t claim_in_process(struct mc *m, char *err, size_t n) {
    uint64_t mine = ((uint64_t)(uint32_t)getpid() << 32) | __atomic_add_fetch(&claim_counter, 1, __ATOMIC_RELAXED);
    uint64_t cur = 0;
    if (!__atomic_compare_exchange_n(&m->ctl->owner, &cur, mine, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return err_out(err, n, BL_EBUSY, "key '%s' is already held by a controller in this process; one controller per key", m->key);
    m->claim = mine;
    return BL_OK;
}

static int32_t claim_shm(struct mc *m, char *err, size_t n) {
    if (take_lock(m->shm_fd, CTRL_LOCK_BYTE) != 0) {
        if (errno != EAGAIN && errno != EACCES)
            return err_out(err, n, BL_EBACKEND, "cannot lock the segment %s: %s", m->seg_path, strerror(errno));
        pid_t holder = (pid_t)(__atomic_load_n(&m->ctl->owner, __ATOMIC_ACQUIRE) >> 32);
        char who[32] = "";
        if (holder > 0) snprintf(who, sizeof who, " (pid %d)", (int)holder);
        return err_out(err, n, BL_EBUSY, "key '%s' is already held by a controller%s; one controller per key", m->key, who);
    }
    m->shm_claimed = 1;
    /* For the message above only: the lock, not this word, is the claim. */
    m->claim = ((uint64_t)(uint32_t)getpid() << 32) | __atomic_add_fetch(&claim_counter, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&m->ctl->owner, m->claim, __ATOMIC_RELEASE);
    return BL_OK;
}

static int32_t try_shm(struct mc *m, char *err, size_t n, int *found) {
    /* Reopened on every look: the directory may appear, or be replaced, while we wait. */
    int32_t rc = open_dir(m, 0, err, n);
    if (rc || m->dir_fd < 0) return rc;
    int fd = openat(m->dir_fd, m->key, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return errno == ENOENT ? BL_OK : refuse_open(m, errno, err, n);
    struct stat st;
    struct header h;
    rc = check_segment(m, fd, &st, err, n);
    if (rc) goto out;
    if (read_header(fd, &st, &h) != 0 || h.magic == 0 || h.ready == 0) {
        m->seen_unready = 1; /* still being set up */
        goto out;
    }
    rc = check_header(m, &h, &st, err, n);
    if (rc) goto out;
    int held = lock_held(fd, COPROC_LOCK_BYTE);
    if (held == 0) {
        reclaim(m, fd); /* a dead coprocessor's leftover, or a file nobody serves: wait for a live one */
        goto out;
    }
    if (h.ready != 1) {
        m->seen_unready = 1; /* stopping: its coprocessor removes it */
        goto out;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        rc = err_out(err, n, BL_EBACKEND, "mmap of %s: %s", m->seg_path, strerror(errno));
        goto out;
    }
    m->ctl = p;
    m->size = (size_t)st.st_size;
    m->slots = h.slots; /* the checked copy: the rings are placed by it, not by shared memory */
    m->slot_bytes = h.slot_bytes;
    m->shm_fd = fd;
    m->shm_dev = st.st_dev;
    m->shm_ino = st.st_ino;
    m->locality = LOC_PROCESS;
    *found = 1;
    return BL_OK;
out:
    close(fd);
    return rc;
}

/* Let go of a region found by a connect that then failed, so that connect may be retried. */
static void ctrl_forget(struct mc *m) {
    if (m->entry)
        release_entry(m);
    else if (m->ctl)
        munmap(m->ctl, m->size);
    m->ctl = NULL;
    if (m->shm_fd >= 0) close(m->shm_fd);
    m->shm_fd = -1;
}

static int32_t ctrl_connect(struct mc *m, uint64_t deadline, char *err, size_t n) {
    ctrl_forget(m);
    int32_t rc = segment_dir_path(m, err, n);
    if (rc) return rc;
    for (;;) {
        pthread_mutex_lock(&table_lock);
        struct entry *e = find_entry(m->key);
        if (e && e->ctl && __atomic_load_n(&e->ctl->ready, __ATOMIC_ACQUIRE) == 1) {
            e->refs++;
            m->entry = e;
            m->ctl = e->ctl;
            m->size = e->size;
            m->slots = e->ctl->slots;
            m->slot_bytes = e->ctl->slot_bytes;
            m->locality = e->ctl->locality;
        }
        pthread_mutex_unlock(&table_lock);
        int found = m->entry != NULL;
        if (!found) {
            m->seen_unready = 0;
            rc = try_shm(m, err, n, &found);
            if (rc) return rc;
        }
        if (found) break;
        if (m->host->now_ns() > deadline)
            return err_out(err, n, BL_ETIMEOUT,
                           "no coprocessor serves key '%s' (looked in this process and for the segment %s%s); "
                           "start it first, e.g. `backline coprocessor serve --key %s`", m->key, m->seg_path,
                           m->seen_unready ? ", which exists but is not being served yet" : "", m->key);
        usleep(200);
    }
    if (m->want_locality != LOC_ANY && m->want_locality != m->locality)
        return err_out(err, n, BL_EINVAL, "the placement says the coprocessor on key '%s' runs in %s, but it runs in %s",
                       m->key, locality_names[m->want_locality], locality_names[m->locality]);
    return m->entry ? claim_in_process(m, err, n) : claim_shm(m, err, n);
}

static int32_t deliver_inline(void *impl, uint64_t seq, uint32_t slot) {
    (void)seq;
    (void)slot;
    struct mc *m = impl;
    if (!__atomic_load_n(&m->entry->alive, __ATOMIC_ACQUIRE)) return BL_EPEER;
    int32_t rc = m->host->serve_pending(m->entry->coproc);
    return rc < 0 ? rc : BL_OK;
}

static int32_t alive_in_process(void *impl) {
    struct mc *m = impl;
    return __atomic_load_n(&m->entry->alive, __ATOMIC_ACQUIRE);
}

static int32_t alive_process(void *impl) {
    struct mc *m = impl;
    /* "cannot tell" counts as alive: the round's deadline still bounds the wait. */
    return __atomic_load_n(&m->ctl->ready, __ATOMIC_ACQUIRE) == 1 && lock_held(m->shm_fd, COPROC_LOCK_BYTE) != 0;
}

/* ---- hooks ---- */

static int32_t mc_connect(void *impl, uint64_t deadline, char *err, size_t n) {
    struct mc *m = impl;
    return m->role == BL_COPROCESSOR ? coproc_connect(m, err, n) : ctrl_connect(m, deadline, err, n);
}

static int32_t mc_alloc_memory(void *impl, char *err, size_t n) {
    struct mc *m = impl;
    return m->role == BL_COPROCESSOR ? coproc_alloc(m, err, n) : BL_OK; /* the coprocessor owns the region */
}

static int32_t mc_exchange_keys(void *impl, uint64_t deadline, char *err, size_t n) {
    (void)deadline;
    (void)err;
    (void)n;
    struct mc *m = impl;
    if (m->role == BL_COPROCESSOR) {
        init_ctl(m);
        __atomic_store_n(&m->ctl->ready, 1, __ATOMIC_RELEASE);
    } /* a controller took the geometry when it found the region */
    return BL_OK;
}

static int32_t mc_establish(void *impl, bl_channel *ch, uint64_t deadline, char *err, size_t n) {
    (void)deadline;
    (void)err;
    (void)n;
    struct mc *m = impl;
    ch->request_ring = ring(m, 0);
    ch->reply_ring = ring(m, 1);
    ch->slots = m->slots;
    ch->slot_bytes = m->slot_bytes;
    ch->impl = m;
    if (m->locality != LOC_INLINE) {
        ch->doorbell = m->ctl->doorbell;
        ch->doorbell_shared = m->locality == LOC_PROCESS;
    }
    if (m->role == BL_CONTROLLER) {
        if (m->locality == LOC_INLINE) ch->deliver = deliver_inline;
        ch->peer_alive = m->locality == LOC_PROCESS ? alive_process : alive_in_process;
    }
    return BL_OK;
}

/* A controller thread that may run on the CPU a coprocessor's poller in this process is pinned to
 * leaves that CPU to it: two threads spinning on one CPU take turns a scheduler slice at a time
 * (milliseconds a round). Its affinity comes back when it stops the session. */
static void leave_pinned_cpu(struct mc *m) {
    if (!m->entry || m->entry->cpu < 0) return;
    cpu_set_t cur;
    if (pthread_getaffinity_np(pthread_self(), sizeof cur, &cur) || !CPU_ISSET(m->entry->cpu, &cur) ||
        CPU_COUNT(&cur) < 2)
        return;
    m->saved_affinity = cur;
    CPU_CLR(m->entry->cpu, &cur);
    if (pthread_setaffinity_np(pthread_self(), sizeof cur, &cur) == 0) {
        m->moved_off_cpu = 1;
        m->moved_thread = pthread_self();
    }
}

static int32_t mc_start(void *impl, char *err, size_t n) {
    struct mc *m = impl;
    if (m->role == BL_CONTROLLER) leave_pinned_cpu(m);
    if (m->role != BL_COPROCESSOR || m->locality == LOC_INLINE) return BL_OK;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (m->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(m->cpu, &set);
        pthread_attr_setaffinity_np(&attr, sizeof set, &set);
    }
    int rc = pthread_create(&m->thread, &attr, poller, m);
    pthread_attr_destroy(&attr);
    if (rc) return err_out(err, n, BL_EBACKEND, "cannot start the poller thread%s: %s", m->cpu >= 0 ? " (pinned)" : "", strerror(rc));
    m->thread_running = 1;
    return BL_OK;
}

static int32_t mc_stop(void *impl, char *err, size_t n) {
    (void)err;
    (void)n;
    struct mc *m = impl;
    if (m->thread_running) {
        pthread_join(m->thread, NULL); /* the core set the stop flag and rang the doorbell */
        m->thread_running = 0;
    }
    if (m->role == BL_COPROCESSOR && m->ctl) {
        /* Controllers waiting on us see the peer gone instead of waiting out a deadline. */
        __atomic_store_n(&m->ctl->ready, 2, __ATOMIC_RELEASE);
        if (m->entry) __atomic_store_n(&m->entry->alive, 0, __ATOMIC_RELEASE);
    }
    if (m->moved_off_cpu && pthread_equal(pthread_self(), m->moved_thread))
        pthread_setaffinity_np(pthread_self(), sizeof m->saved_affinity, &m->saved_affinity);
    m->moved_off_cpu = 0;
    if (m->role == BL_CONTROLLER && m->claim && m->ctl) {
        uint64_t mine = m->claim;
        __atomic_compare_exchange_n(&m->ctl->owner, &mine, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
        m->claim = 0;
    }
    if (m->shm_claimed) { /* so the next controller may connect before this session is destroyed */
        drop_lock(m->shm_fd, CTRL_LOCK_BYTE);
        m->shm_claimed = 0;
    }
    return BL_OK;
}

static void release_entry(struct mc *m) {
    pthread_mutex_lock(&table_lock);
    struct entry *e = m->entry;
    if (m->role == BL_COPROCESSOR) __atomic_store_n(&e->alive, 0, __ATOMIC_RELEASE);
    if (--e->refs == 0) {
        for (struct entry **pp = &table; *pp; pp = &(*pp)->next)
            if (*pp == e) {
                *pp = e->next;
                break;
            }
        free(e->ctl);
        free(e);
    }
    pthread_mutex_unlock(&table_lock);
    m->entry = NULL;
}

static void mc_close(void *impl) {
    struct mc *m = impl;
    char err[8];
    mc_stop(m, err, sizeof err);
    if (m->entry) {
        release_entry(m);
    } else if (m->ctl) {
        if (m->role == BL_COPROCESSOR) {
            struct stat mine = {.st_dev = m->shm_dev, .st_ino = m->shm_ino};
            /* Before the lock goes with the fd: while it is held nobody else unlinks or re-creates the name. */
            if (m->created && same_segment(m, &mine)) unlinkat(m->dir_fd, m->key, 0);
        } else if (lock_held(m->shm_fd, COPROC_LOCK_BYTE) == 0) {
            reclaim(m, m->shm_fd); /* its coprocessor died: remove the leftover, unless a new one took the name */
        }
        munmap(m->ctl, m->size);
    }
    if (m->shm_fd >= 0) close(m->shm_fd);
    if (m->dir_fd >= 0) close(m->dir_fd);
    free(m);
}

static const bl_backend backend = {
    .abi_version = BACKLINE_ABI_VERSION,
    .name = "memcpy",
    .config_keys = config_keys,
    .open = mc_open,
    .connect = mc_connect,
    .alloc_memory = mc_alloc_memory,
    .exchange_keys = mc_exchange_keys,
    .establish_channel = mc_establish,
    .start = mc_start,
    .stop = mc_stop,
    .close = mc_close,
};

BL_API const bl_backend *backline_transport_backend_v1(void) { return &backend; }
