/*
 * backline/sdk/remote.h -- a transport backend whose coprocessor is in another process or on
 * another host, for transports whose data path is their own (rdma: queue pairs; ucx: UCX
 * endpoints). Like backline/sdk/oob.h, on which it is built, it is not part of the ABI: a
 * plugin compiles backline_core/native/src/remote.c into its own library
 * (plain_library(..., oob=True)), private to it, so every networked transport speaks the same
 * handshake and runs the same lifecycle one way.
 *
 * A networked transport is its data path and one record (bl_remote_transport, below): its
 * handshake's magic and peer part, its keys, and its links (one per controller: a queue pair,
 * an endpoint). bl_remote_backend makes the whole bl_backend of that record: open (the keys
 * host, port, cpu, rt_priority and the core's timeouts; the role, runs_in and host ABI
 * checks), connect (the controller dials and reads the OFFER, the coprocessor listens),
 * alloc_memory, exchange_keys (the controller's link and CONNECT + READY), establish_channel
 * (the rings seeded with the rounds served before), start (the coprocessor's poller thread,
 * pinned and SCHED_FIFO as configured, and its acceptor thread, which takes one controller at
 * a time and hands its link to the poller), stop and close; the channel's hooks call the
 * record's deliver, poll and alive with the link of the moment.
 *
 * The lower layer (bl_remote_open ... bl_remote_close) stays available to a backend that
 * uses the handshake with a data path of another shape (the FPGA controller's engine).
 *
 * The handshake (docs/rdma.md, docs/ucx.md, "Handshake"; docs/architecture.md, "Trust model"):
 * backline/sdk/oob.h's 12-byte header with the transport's magic and version, then a
 * fixed-size big-endian body:
 *   CHALLENGE (5) the coprocessor's nonce Ns[32], sent as soon as it accepts
 *   HELLO   (1) abi u32 | key[BL_KEY_MAX_LEN], NUL-padded | reserved u32 | Nc[32] | tag_C[32]
 *   OFFER   (2) status u32 | slots u32 | slot_bytes u32 | rounds served u64 | peer part | text[160] | tag_S[32]
 *   CONNECT (3) peer part
 *   READY   (4) status u32 | text[160]
 * The tags are backline/trust.h's, over the protocol name proto->transport, both nonces, the
 * connection's addresses and HELLO's first 72 bytes (abi, key, reserved), keyed by the secret
 * in secret_file (a key both roles need). A HELLO whose tag does not check is refused
 * (OFFER status BL_EAUTH, no tag) before anything about the coprocessor is said; a controller
 * believes an OFFER, refusals included, only with a tag_S that checks.
 * The peer part (peer_bytes) is the transport's: what the other side needs to reach this one.
 * A connection stays open for the session's life: its closing tells each side the other has
 * gone (over every data path, shared memory included), and the coprocessor then takes the
 * next controller, which continues the round sequence.
 */
#ifndef BACKLINE_REMOTE_H
#define BACKLINE_REMOTE_H

#include <backline/backline.h>
#include <backline/sdk/oob.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define BL_REMOTE_TEXT_BYTES 160u /* a refusal's text in OFFER and READY */
/* The version of the handshake below, in every message's header (2: authenticated). A
 * transport's protocol record uses it; only its magic and peer part are its own. */
#define BL_REMOTE_HANDSHAKE_VERSION 2
/* The configuration keys bl_remote_open reads that a backend lists in its config_keys
 * (connect_timeout_ms and timeout_ms are the core's own: it parses them and passes the
 * values in bl_open_args). */
#define BL_REMOTE_CONFIG_KEYS "host", "port", "cpu", "rt_priority", "secret_file"

/* One transport's handshake. */
typedef struct bl_remote_protocol {
    const char *transport; /* "rdma": in errors and notes, and `backline-transport-rdma` */
    uint32_t magic;        /* of every message header: "BLRD" is 0x424c5244 */
    uint16_t version;      /* of the handshake: BL_REMOTE_HANDSHAKE_VERSION */
    uint32_t peer_bytes;   /* the peer part of OFFER and CONNECT */
    /* What the coprocessor does with CONNECT's peer part, for the controller's error when
     * READY says it failed: "connect its queue pair to this one". */
    const char *accepting;
} bl_remote_protocol;

/* A coprocessor's links, one per controller, made and connected on the acceptor thread and
 * used on the poller thread once bl_remote_take has handed them over. `arg` is bl_remote_open's. */
typedef struct bl_remote_links {
    /* A link for the next controller, writing this side's peer part (peer_bytes) for its OFFER;
     * NULL with *rc and err set: the controller is refused with them. */
    void *(*create)(void *arg, uint8_t *peer, int32_t *rc, char *err, size_t n);
    /* Connect `link` to the controller's peer part from CONNECT. A failure goes back to the
     * controller in READY, with its status and err. */
    int32_t (*accept)(void *arg, void *link, const uint8_t *peer, char *err, size_t n);
    /* Free a link that never reached the poller (its handshake failed, its controller left
     * before a round, or the session closed). Links the poller took are the transport's. */
    void (*destroy)(void *arg, void *link);
} bl_remote_links;

typedef struct bl_remote {
    const bl_remote_protocol *proto;
    const bl_remote_links *links;
    void *arg;
    int role, runs_in;
    char key[BL_KEY_MAX_LEN + 1];
    const bl_host_api *host;
    bl_session *session;
    uint32_t slots, slot_bytes; /* a controller's become the coprocessor's at bl_remote_dial */
    /* configuration */
    char host_name[256];
    int port, cpu, rt_priority;
    uint64_t connect_timeout_ns, timeout_ns; /* the core's, from bl_open_args */
    uint8_t *rings[2];  /* request ring, reply ring (bl_remote_establish) */
    uint64_t received;  /* frames published into this side's receive ring: the data path's count */
    int same_host;      /* the current peer's connection joins two processes of this host */
    /* controller: the connection to its coprocessor */
    int fd;
    uint64_t base; /* rounds the coprocessor had served when this controller connected */
    /* coprocessor */
    int listen_fd, stop_fd, ctl_fd; /* ctl_fd: the current controller's connection */
    void *next_link;                /* published by the acceptor, taken by the poller */
    pthread_t poller, acceptor;
    int poller_running, acceptor_running, stopping;
    char applied[256]; /* what start applied to the poller thread (pinning, SCHED_FIFO) */
    char secret_path[1024]; /* secret_file */
    bl_oob_secret secret;   /* both roles: the placement's, read from secret_path at connect */
    uint64_t last_note_ns, notes_held; /* acceptor: refusals are noted at most once a second */
} bl_remote;

/* Whether the TCP connection fd joins two processes of one host: its two ends have the same
 * address (a loopback address, or one of this host's). A peer in another network namespace
 * of this machine counts as another host. */
int bl_remote_same_host(int fd);

/* From a backend's open: the checks and keys above into r (which needs no other set-up and
 * holds nothing to free if this fails). Errors name proto->transport. */
int32_t bl_remote_open(bl_remote *r, const bl_remote_protocol *proto, const bl_remote_links *links, void *arg,
                       const bl_open_args *a, char *err, size_t n);
/* A line on stderr: "backline-transport-rdma: coprocessor 'dec': ...". */
void bl_remote_note(const bl_remote *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Controller: dial the coprocessor (again, when a connect is retried), send HELLO and read its
 * OFFER. A refusal is an error with the coprocessor's status and text. Its ring geometry
 * becomes r->slots and r->slot_bytes, what it has served r->base, whether it is on this host
 * r->same_host, and its peer part is copied into peer (peer_bytes). */
int32_t bl_remote_dial(bl_remote *r, uint64_t deadline, uint8_t *peer, char *err, size_t n);
/* Controller: send CONNECT with this side's peer part and wait for READY. */
int32_t bl_remote_connect(bl_remote *r, const uint8_t *peer, uint64_t deadline, char *err, size_t n);
/* Controller, from peer_alive: 0 (with the host's error_text set) once the coprocessor's
 * connection has closed, else 1. */
int bl_remote_alive(const bl_remote *r);

/* A transport's channel hooks for each role (bl_channel's deliver, poll, peer_alive). */
typedef struct bl_remote_hooks {
    int32_t (*controller_deliver)(void *impl, uint64_t seq, uint32_t slot);
    void (*controller_poll)(void *impl);
    int32_t (*controller_alive)(void *impl);
    int32_t (*coprocessor_deliver)(void *impl, uint64_t seq, uint32_t slot);
    void (*coprocessor_poll)(void *impl);
} bl_remote_hooks;

/* Both roles, from establish_channel: the rings (this side's memory), geometry and this
 * role's hooks into ch, with ch->impl = impl. A controller's rings show what a shared ring
 * would after the last controller's rounds, so the core numbers its rounds from base + 1, as
 * the coprocessor expects. Returns the frames already counted in this side's receive ring:
 * the base for a controller, 0 for a coprocessor. */
uint64_t bl_remote_establish(bl_remote *r, bl_channel *ch, uint8_t *request_ring, uint8_t *reply_ring,
                             const bl_remote_hooks *hooks, void *impl);

/* Coprocessor, from connect: listen on the endpoint (once). */
int32_t bl_remote_listen(bl_remote *r, char *err, size_t n);
/* Coprocessor, from start (a controller: nothing): the poller and acceptor threads. */
int32_t bl_remote_start(bl_remote *r, char *err, size_t n);
/* Both roles, from stop: join the threads (the core has set the poller's stop flag) and
 * close a controller's connection, which lets the next controller in at once. */
void bl_remote_stop(bl_remote *r);
/* From close, before the transport frees what its links use: stop, destroy a link no poller
 * took, close the sockets. */
void bl_remote_close(bl_remote *r);

/* Coprocessor, on the poller thread (per round: inline, one load when nothing is new): the
 * link of a controller that has just been admitted, or NULL. The transport then frees the
 * link it had, here, on the thread that used it. */
static inline void *bl_remote_take(bl_remote *r) {
    if (__builtin_expect(__atomic_load_n(&r->next_link, __ATOMIC_ACQUIRE) == NULL, 1)) return NULL;
    return __atomic_exchange_n(&r->next_link, NULL, __ATOMIC_ACQ_REL);
}

/* ---- the whole backend of a networked transport ---------------------------------------- */

/* The other side of a link, as the transport's link_accept gets it. */
typedef struct bl_remote_peer {
    const uint8_t *record; /* its peer part (peer_bytes): from CONNECT, or the controller's OFFER */
    const char *who;       /* "the controller", "the coprocessor at HOST:PORT": for errors */
    int same_host;         /* it runs on this host (bl_remote_same_host of the handshake's connection) */
} bl_remote_peer;

/* A networked transport: what it does that the others do not. `state` is the transport's own
 * (state_bytes, zeroed, allocated by the core); `link` what its link_create made. Hooks marked
 * optional may be NULL. Threads: open, prepare, alloc and the controller's link hooks run on the
 * session's bring-up thread; a coprocessor's link_create, link_accept and (for a link the poller
 * never took) link_destroy on its acceptor thread; the round hooks on the thread that runs the
 * rounds (the controller's, the coprocessor's poller), as do link_start and link_destroy for the
 * links the poller takes. */
typedef struct bl_remote_transport {
    bl_remote_protocol protocol;
    const char *name;               /* the backend's name (bl_backend.name): "rdma" */
    const char *const *config_keys; /* NULL-terminated: BL_REMOTE_CONFIG_KEYS and the transport's own */
    size_t state_bytes;
    /* open: read the transport's own keys into state (r is open: role, geometry, endpoint).
     * Configuration only: nothing to connect, nothing shared. */
    int32_t (*open)(void *state, bl_remote *r, const bl_open_args *a, char *err, size_t n);
    /* connect, both roles, before the controller dials or the coprocessor listens: what the data
     * path needs (a device, a worker). Called again when a connect is retried. */
    int32_t (*prepare)(void *state, char *err, size_t n);
    /* Optional: the rings' memory, `bytes` bytes (request ring, then reply ring), zeroed, into
     * *rings; the transport frees it in release. NULL: the core allocates and frees it. */
    int32_t (*alloc)(void *state, size_t bytes, uint8_t **rings, char *err, size_t n);
    /* A link toward a new peer, writing this side's peer part (peer_bytes) into `record`; NULL
     * with *rc and err set on failure. */
    void *(*link_create)(void *state, uint8_t *record, int32_t *rc, char *err, size_t n);
    /* Aim `link` at the other side. A failure goes back to a controller in READY. */
    int32_t (*link_accept)(void *state, void *link, const bl_remote_peer *peer, char *err, size_t n);
    /* Optional: on the thread that will use the link, before its first round (the controller's
     * exchange_keys; the coprocessor's poller when it takes it). A failure must leave the link
     * failing its rounds; the core notes err on a coprocessor. */
    int32_t (*link_start)(void *state, void *link, char *err, size_t n);
    void (*link_destroy)(void *state, void *link);
    /* The round path. deliver: send the frame at `frame` (this side's ring, slot `slot`, round
     * seq) to the same slot of the peer's ring. poll: publish what has arrived (r->received);
     * on a coprocessor before its first controller link is NULL. alive (controller): 1, or 0
     * when the link has failed. failure: the text of a failed deliver or alive. */
    int32_t (*deliver)(void *state, void *link, const uint8_t *frame, uint64_t seq, uint32_t slot);
    void (*poll)(void *state, void *link);
    int (*alive)(void *state, void *link);
    const char *(*failure)(void *state, void *link);
    /* Optional: what the controller's link runs over, noted once at establish ("UCX transports:
     * posix/memory"); "" says nothing. */
    void (*describe)(void *state, void *link, char *out, size_t n);
    /* Free what state holds (a device, a worker, memory of alloc's), whatever step it reached:
     * after every link is gone and the core's threads have stopped. */
    void (*release)(void *state);
} bl_remote_transport;

/* The backend of transport t (one per library: its entry returns this):
 *     BL_API const bl_backend *backline_transport_backend_v1(void) { return bl_remote_backend(&transport); }
 */
const bl_backend *bl_remote_backend(const bl_remote_transport *t);

#endif
