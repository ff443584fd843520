/*
 * memcpy transport backend: the two roles share one region holding a control block,
 * the request ring and the reply ring. The coprocessor owns the region; the controller
 * finds it by session key.
 *
 *   locality=inline   region in this process; the controller runs the coprocessor
 *                     function itself at post time (the deliver hook);
 *   locality=thread   region in this process; a poller thread answers;
 *   locality=process  region is POSIX shared memory /backline.<key>; the coprocessor
 *                     runs in another process (e.g. `backline coprocessor serve`).
 *
 * A controller looks for its key in this process first, then in shared memory, so it
 * needs no locality of its own.
 */
#define _GNU_SOURCE
#include <backline/backline.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#define REGION_MAGIC 0x4d454d4350593031ull /* "MEMCPY01" */
#define CTL_BYTES 384u

enum locality { LOC_INLINE = 0, LOC_THREAD = 1, LOC_PROCESS = 2, LOC_ANY = -1 };
static const char *const locality_names[] = {"inline", "thread", "process"};

/* Control block at the start of the region. Hot words sit on their own cache lines. */
struct ctl {
    uint64_t magic;
    uint32_t abi, slots, slot_bytes;
    int32_t locality;
    int32_t coproc_pid;
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
    int shm_fd;
    int created;          /* coprocessor: this session created the shared-memory name */
    dev_t shm_dev;        /* identity of the mapped segment, so a stale name is told apart */
    ino_t shm_ino;
    char shm_name[160];
    struct entry *entry;
    uint64_t claim;
    pthread_t thread;
    int thread_running;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *table;
static uint32_t claim_counter;

static const char *const config_keys[] = {"locality", "cpu", NULL};

static int32_t err_out(char *err, size_t n, int32_t rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int32_t err_out(char *err, size_t n, int32_t rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return rc;
}

static int pid_alive(pid_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

static size_t region_size(uint32_t slots, uint32_t slot_bytes) {
    return CTL_BYTES + 2 * (size_t)slots * slot_bytes;
}

static uint8_t *ring(struct ctl *c, int which) {
    return (uint8_t *)c + CTL_BYTES + (size_t)which * c->slots * c->slot_bytes;
}

/* ---- config ---- */

static int32_t read_config(struct mc *m, const char *config, char *err, size_t n) {
    m->want_locality = LOC_ANY;
    m->cpu = -1;
    const char *p = config;
    while (p && *p) {
        const char *end = strchr(p, ';');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        size_t klen = eq ? (size_t)(eq - p) : len, vlen = eq ? len - klen - 1 : 0;
        const char *v = eq ? eq + 1 : "";
        if (klen == 8 && !strncmp(p, "locality", 8)) {
            int found = 0;
            for (int i = 0; i < 3; ++i)
                if (strlen(locality_names[i]) == vlen && !strncmp(v, locality_names[i], vlen)) m->want_locality = i, found = 1;
            if (!found) return err_out(err, n, BL_EINVAL, "locality=%.*s: must be inline, thread or process", (int)vlen, v);
        } else if (klen == 3 && !strncmp(p, "cpu", 3)) {
            char buf[16];
            if (vlen == 0 || vlen >= sizeof buf) return err_out(err, n, BL_EINVAL, "cpu=%.*s: must be a CPU number", (int)vlen, v);
            memcpy(buf, v, vlen);
            buf[vlen] = 0;
            char *e;
            long cpu = strtol(buf, &e, 10);
            if (*e || cpu < 0 || cpu >= get_nprocs_conf())
                return err_out(err, n, BL_EINVAL, "cpu=%s: not a CPU of this machine (it has %d)", buf, get_nprocs_conf());
            m->cpu = (int)cpu;
        }
        p = end ? end + 1 : NULL;
    }
    if (m->role == BL_COPROCESSOR) m->locality = m->want_locality == LOC_ANY ? LOC_THREAD : m->want_locality;
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
    snprintf(m->key, sizeof m->key, "%s", a->key);
    snprintf(m->shm_name, sizeof m->shm_name, "/backline.%s", a->key);
    int32_t rc = read_config(m, a->config, err, n);
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

static int32_t coproc_connect(struct mc *m, char *err, size_t n) {
    m->size = region_size(m->slots, m->slot_bytes);
    if (m->locality != LOC_PROCESS) {
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
        e->next = table;
        table = e;
        m->entry = e;
        pthread_mutex_unlock(&table_lock);
        return BL_OK;
    }
    for (int attempt = 0; attempt < 2; ++attempt) {
        int fd = shm_open(m->shm_name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd >= 0) {
            if (ftruncate(fd, (off_t)m->size) != 0) {
                int e = errno;
                close(fd);
                shm_unlink(m->shm_name);
                return err_out(err, n, BL_ENOMEM, "cannot size shared memory %s to %zu bytes: %s", m->shm_name, m->size, strerror(e));
            }
            void *p = mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (p == MAP_FAILED) {
                int e = errno;
                close(fd);
                shm_unlink(m->shm_name);
                return err_out(err, n, BL_ENOMEM, "mmap of %s (%zu bytes): %s", m->shm_name, m->size, strerror(e));
            }
            m->shm_fd = fd;
            m->created = 1;
            m->ctl = p;
            /* Claim the name at once: a second coprocessor must see a live owner even
             * before this one finishes bring-up. */
            m->ctl->coproc_pid = getpid();
            return BL_OK;
        }
        if (errno != EEXIST)
            return err_out(err, n, BL_EBACKEND, "shm_open(%s): %s", m->shm_name, strerror(errno));
        /* The name exists: refuse if its coprocessor lives, reclaim it if not. */
        fd = shm_open(m->shm_name, O_RDWR, 0600);
        if (fd >= 0) {
            struct stat st;
            pid_t owner = 0;
            if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(struct ctl)) {
                struct ctl *c = mmap(NULL, sizeof *c, PROT_READ, MAP_SHARED, fd, 0);
                if (c != MAP_FAILED) {
                    owner = c->coproc_pid;
                    munmap(c, sizeof *c);
                }
            }
            close(fd);
            if (owner == 0)
                return err_out(err, n, BL_EBUSY, "key '%s' is being set up by another coprocessor (shared memory %s has no owner yet); "
                               "retry, or remove /dev/shm%s if no coprocessor is running", m->key, m->shm_name, m->shm_name);
            if (pid_alive(owner))
                return err_out(err, n, BL_EBUSY, "key '%s' is already served by coprocessor pid %d (shared memory %s)", m->key, (int)owner, m->shm_name);
        }
        shm_unlink(m->shm_name); /* stale: its coprocessor died without cleaning up */
    }
    return err_out(err, n, BL_EBUSY, "cannot create shared memory %s: it keeps reappearing", m->shm_name);
}

static int32_t coproc_alloc(struct mc *m, char *err, size_t n) {
    if (m->locality == LOC_PROCESS) {
        (void)err;
        (void)n; /* mapped at connect; zero-filled by ftruncate */
    } else {
        void *p = aligned_alloc(4096, (m->size + 4095) & ~(size_t)4095);
        if (!p) return err_out(err, n, BL_ENOMEM, "cannot allocate %zu bytes of ring memory", m->size);
        memset(p, 0, m->size);
        m->ctl = p;
        pthread_mutex_lock(&table_lock);
        m->entry->ctl = m->ctl;
        m->entry->size = m->size;
        pthread_mutex_unlock(&table_lock);
    }
    return BL_OK;
}

static void *poller(void *arg) {
    struct mc *m = arg;
    m->host->serve(m->session);
    return NULL;
}

/* ---- controller side ---- */

static struct entry *find_entry(const char *key) {
    for (struct entry *e = table; e; e = e->next)
        if (e->alive && !strcmp(e->key, key)) return e;
    return NULL;
}

static int32_t claim(struct mc *m, char *err, size_t n) {
    uint64_t mine = ((uint64_t)(uint32_t)getpid() << 32) | __atomic_add_fetch(&claim_counter, 1, __ATOMIC_RELAXED);
    uint64_t cur = 0;
    for (;;) {
        if (__atomic_compare_exchange_n(&m->ctl->owner, &cur, mine, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            m->claim = mine;
            return BL_OK;
        }
        pid_t holder = (pid_t)(cur >> 32);
        if (holder == getpid() || pid_alive(holder))
            return err_out(err, n, BL_EBUSY, "key '%s' is already held by a controller (pid %d); one controller per key", m->key, (int)holder);
        /* the holder died: take the claim over (cur holds its value for the CAS) */
    }
}

static int32_t try_shm(struct mc *m, char *err, size_t n, int *found) {
    int fd = shm_open(m->shm_name, O_RDWR, 0600);
    if (fd < 0) return BL_OK;
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < CTL_BYTES) {
        close(fd);
        return BL_OK; /* still being created */
    }
    struct ctl *c = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    m->shm_dev = st.st_dev;
    m->shm_ino = st.st_ino;
    if (c == MAP_FAILED) return err_out(err, n, BL_EBACKEND, "mmap of %s: %s", m->shm_name, strerror(errno));
    if (__atomic_load_n(&c->ready, __ATOMIC_ACQUIRE) != 1 || c->magic != REGION_MAGIC) {
        munmap(c, (size_t)st.st_size);
        return BL_OK; /* not ready yet */
    }
    if (c->abi != BACKLINE_ABI_VERSION || c->size != (uint64_t)st.st_size || c->size != region_size(c->slots, c->slot_bytes)) {
        munmap(c, (size_t)st.st_size);
        return err_out(err, n, BL_EABI, "shared memory %s was made by an incompatible coprocessor (ABI %u)", m->shm_name, c->abi);
    }
    if (!pid_alive(c->coproc_pid)) {
        munmap(c, (size_t)st.st_size);
        shm_unlink(m->shm_name);
        return BL_OK; /* stale segment from a dead coprocessor; keep waiting for a live one */
    }
    m->ctl = c;
    m->size = (size_t)st.st_size;
    m->locality = LOC_PROCESS;
    *found = 1;
    return BL_OK;
}

static int32_t ctrl_connect(struct mc *m, uint64_t deadline, char *err, size_t n) {
    for (;;) {
        pthread_mutex_lock(&table_lock);
        struct entry *e = find_entry(m->key);
        if (e && e->ctl && __atomic_load_n(&e->ctl->ready, __ATOMIC_ACQUIRE) == 1) {
            e->refs++;
            m->entry = e;
            m->ctl = e->ctl;
            m->size = e->size;
            m->locality = e->ctl->locality;
        }
        pthread_mutex_unlock(&table_lock);
        int found = m->entry != NULL;
        if (!found) {
            int32_t rc = try_shm(m, err, n, &found);
            if (rc) return rc;
        }
        if (found) break;
        if (m->host->now_ns() > deadline)
            return err_out(err, n, BL_ETIMEOUT,
                           "no coprocessor serves key '%s' (looked in this process and for shared memory %s); "
                           "start it first, e.g. `backline coprocessor serve --key %s`", m->key, m->shm_name, m->key);
        usleep(200);
    }
    if (m->want_locality != LOC_ANY && m->want_locality != m->locality)
        return err_out(err, n, BL_EINVAL, "locality=%s was asked for, but the coprocessor on key '%s' runs with locality=%s",
                       locality_names[m->want_locality], m->key, locality_names[m->locality]);
    return claim(m, err, n);
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
    return __atomic_load_n(&m->ctl->ready, __ATOMIC_ACQUIRE) == 1 && pid_alive(m->ctl->coproc_pid);
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
    struct mc *m = impl;
    if (m->role == BL_COPROCESSOR) {
        init_ctl(m);
        __atomic_store_n(&m->ctl->ready, 1, __ATOMIC_RELEASE);
    } else {
        m->slots = m->ctl->slots;
        m->slot_bytes = m->ctl->slot_bytes;
        (void)err;
        (void)n;
    }
    return BL_OK;
}

static int32_t mc_establish(void *impl, bl_channel *ch, uint64_t deadline, char *err, size_t n) {
    (void)deadline;
    (void)err;
    (void)n;
    struct mc *m = impl;
    ch->request_ring = ring(m->ctl, 0);
    ch->reply_ring = ring(m->ctl, 1);
    ch->slots = m->ctl->slots;
    ch->slot_bytes = m->ctl->slot_bytes;
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

static int32_t mc_start(void *impl, char *err, size_t n) {
    struct mc *m = impl;
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
    if (m->role == BL_CONTROLLER && m->claim && m->ctl) {
        uint64_t mine = m->claim;
        __atomic_compare_exchange_n(&m->ctl->owner, &mine, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
        m->claim = 0;
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

static int same_segment(const struct mc *m) {
    int fd = shm_open(m->shm_name, O_RDONLY, 0600);
    if (fd < 0) return 0;
    struct stat st;
    int same = fstat(fd, &st) == 0 && st.st_dev == m->shm_dev && st.st_ino == m->shm_ino;
    close(fd);
    return same;
}

static void mc_close(void *impl) {
    struct mc *m = impl;
    char err[8];
    mc_stop(m, err, sizeof err);
    if (m->entry) {
        release_entry(m);
    } else if (m->ctl) {
        int coproc_gone = !pid_alive(m->ctl->coproc_pid);
        munmap(m->ctl, m->size);
        if (m->role == BL_COPROCESSOR) {
            if (m->created) shm_unlink(m->shm_name); /* the owner removes its name */
        } else if (coproc_gone && same_segment(m)) {
            shm_unlink(m->shm_name); /* a dead owner's leftover, unless a new owner took the name */
        }
    }
    if (m->shm_fd >= 0) close(m->shm_fd);
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
