/*
 * cuqr transport backend: a Backline controller whose coprocessor is a decoding server that
 * speaks CUDA-Q QEC's real-time decoding RPC over UDP (backline/sdk/cuqr.h): CUDA-Q's own
 * decoding_server, or `backline decoding-server`. Backline does not run that server, so this
 * backend has no coprocessor role.
 *
 * Both rings are this process's own memory. Each round is answered inside the deliver hook,
 * before post returns: the round's payload (the shot's packed bits, LSB first) goes out as one
 * enqueue_syndromes, then get_corrections with reset=1 (so the reply is that shot's flips alone,
 * not an XOR over earlier shots), each a whole slot over a connected UDP socket, each waited
 * for with the round's deadline (timeout_ms). The reply frame is then written into the reply
 * ring exactly as a coprocessor would write it, so the core's collect finds it at once.
 *
 * A decoder's first round in a session, and its first round after a failed one, is preceded by
 * reset_decoder: the server keeps a partial shot or a latched failure (INTERNAL_ERROR at every
 * get_corrections) until then, left by an earlier client or by the failed round.
 *
 * Every request carries a fresh request_id; a datagram that is not a CUQS response to the
 * request being waited for (too short, too long, another magic, another id: a late reply to a
 * timed-out request, or junk) is ignored, and the wait goes on until its deadline.
 * The protocol has no authentication: anything that can send to this socket's port can answer.
 */
#define _GNU_SOURCE
#include <backline/backline.h>
#include <backline/sdk/cuqr.h>

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#define HOST_MAX 255
#define DEFAULT_HOST "127.0.0.1"

struct cuqr {
    const bl_host_api *host;
    bl_session *session;
    char host_name[HOST_MAX + 1];
    char where[HOST_MAX + 16]; /* host:port, for messages */
    int port;
    int64_t decoder_id;    /* -1: each round's own decoder_id */
    int64_t num_syndromes; /* 0: the round's payload bits */
    int64_t return_size;
    uint32_t slot_size;
    uint32_t slots, slot_bytes;
    uint64_t timeout_ns;
    int fd;
    uint8_t *rings;
    uint8_t *tx, *rx; /* one slot each; rx one byte more, so an oversized datagram shows */
    uint32_t next_id;
    int refused; /* the host said nothing listens on the port (ICMP port unreachable) */
    uint32_t clean; /* bit d: decoder d was reset by this session and no round of it failed since */
};

static const char *const config_keys[] = {"host", "port", "decoder_id", "num_syndromes", "return_size",
                                          "slot_size", NULL};

static int32_t fail(char *err, size_t errlen, int32_t rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int32_t fail(char *err, size_t errlen, int32_t rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return rc;
}

/* A deliver hook has no err buffer: its text goes through the host's error_text. */
static int32_t round_fail(struct cuqr *c, int32_t rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int32_t round_fail(struct cuqr *c, int32_t rc, const char *fmt, ...) {
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    c->host->error_text(text);
    return rc;
}

static const char *status_name(int32_t status) {
    switch (status) {
    case CUQR_OK: return "OK";
    case CUQR_INVALID_DECODER: return "INVALID_DECODER";
    case CUQR_BAD_REQUEST: return "BAD_REQUEST";
    case CUQR_INTERNAL_ERROR: return "INTERNAL_ERROR";
    case CUQR_NOT_READY: return "NOT_READY";
    case CUQR_BUSY: return "BUSY";
    case CUQR_SYNDROMES_DROPPED: return "SYNDROMES_DROPPED";
    default: return status > 0 ? "a handler-specific status" : "a protocol error status";
    }
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t bytes_of_bits(int64_t bits) { return ((uint64_t)bits + 7) / 8; }

/* ---- one request and its response ---- */

/* Send tx's header and arg_len argument bytes (already in tx after the header) as one slot, and
 * wait until deadline_ns for the response that carries its request_id. On BL_OK *status is the
 * server's and the result is rx + CUQR_HEADER_BYTES, *result_len bytes (bounds-checked). */
static int32_t call(struct cuqr *c, uint32_t function_id, const char *what, uint32_t arg_len, uint64_t deadline_ns,
                    int32_t *status, uint32_t *result_len) {
    uint32_t id = ++c->next_id;
    put_u32(c->tx, CUQR_REQUEST_MAGIC);
    put_u32(c->tx + 4, function_id);
    put_u32(c->tx + 8, arg_len);
    put_u32(c->tx + 12, id);
    put_u64(c->tx + 16, c->host->now_ns());
    memset(c->tx + CUQR_HEADER_BYTES + arg_len, 0, c->slot_size - CUQR_HEADER_BYTES - arg_len);
    for (int tries = 0;; ++tries) { /* a pending ICMP error fails one send; the next one goes out */
        ssize_t sent = send(c->fd, c->tx, c->slot_size, 0);
        if (sent == (ssize_t)c->slot_size) break;
        if (sent < 0 && errno == ECONNREFUSED && tries < 4) {
            c->refused = 1;
            continue;
        }
        if (sent < 0 && (errno == EINTR || errno == EAGAIN || errno == ENOBUFS) && c->host->now_ns() < deadline_ns)
            continue;
        return round_fail(c, BL_EPEER, "cannot send %s to the decoding server at %s: %s", what, c->where,
                          sent < 0 ? strerror(errno) : "short send");
    }
    for (;;) {
        uint64_t now = c->host->now_ns();
        if (now >= deadline_ns) break;
        uint64_t left_ms = (deadline_ns - now + 999999) / 1000000;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int ready = poll(&p, 1, left_ms > 60000 ? 60000 : (int)left_ms);
        if (ready < 0 && errno != EINTR)
            return round_fail(c, BL_EPEER, "waiting for the decoding server at %s: %s", c->where, strerror(errno));
        if (ready <= 0) continue;
        /* MSG_TRUNC: the datagram's real length, so one longer than a slot is seen and dropped */
        ssize_t n = recv(c->fd, c->rx, (size_t)c->slot_size + 1, MSG_TRUNC | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == ECONNREFUSED) c->refused = 1; /* keep waiting: the deadline decides */
            else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                return round_fail(c, BL_EPEER, "receiving from the decoding server at %s: %s", c->where,
                                  strerror(errno));
            continue;
        }
        if (n < (ssize_t)CUQR_HEADER_BYTES || n > (ssize_t)c->slot_size) continue; /* not a response */
        if (get_u32(c->rx) != CUQR_RESPONSE_MAGIC || get_u32(c->rx + 12) != id) continue; /* junk, or late */
        uint32_t len = get_u32(c->rx + 8);
        if (len > (uint64_t)n - CUQR_HEADER_BYTES)
            return round_fail(c, BL_EPEER, "the decoding server at %s answered %s with result_len=%u, more than the "
                              "%zd bytes its datagram carries", c->where, what, len, n - (ssize_t)CUQR_HEADER_BYTES);
        *status = (int32_t)get_u32(c->rx + 4);
        *result_len = len;
        return BL_OK;
    }
    return round_fail(c, BL_ETIMEOUT, "the decoding server at %s did not answer %s (request_id %u) within "
                      "timeout_ms=%llu%s", c->where, what, id, (unsigned long long)(c->timeout_ns / 1000000),
                      c->refused ? " (the host reports that nothing listens on that port)" : "");
}

static int32_t not_ok(struct cuqr *c, int32_t status, const char *what, int64_t decoder, uint64_t seq) {
    return round_fail(c, status == CUQR_INVALID_DECODER ? BL_EDECODER : BL_EBACKEND,
                      "the decoding server at %s answered %s (%d) to %s for decoder %lld (round %llu)", c->where,
                      status_name(status), status, what, (long long)decoder, (unsigned long long)seq);
}

/* ---- round path ---- */

/* reset_decoder: drops the decoder's partial shot and latched failure on the server. */
static int32_t reset_decoder(struct cuqr *c, int64_t decoder, uint64_t seq, uint64_t deadline) {
    put_u64(c->tx + CUQR_HEADER_BYTES, (uint64_t)decoder);
    int32_t status;
    uint32_t result_len;
    int32_t rc = call(c, CUQR_FN_RESET_DECODER, "reset_decoder", CUQR_RESET_ARGS_BYTES, deadline, &status, &result_len);
    if (rc) return rc;
    return status == CUQR_OK ? BL_OK : not_ok(c, status, "reset_decoder", decoder, seq);
}

static int32_t deliver(void *impl, uint64_t seq, uint32_t slot) {
    struct cuqr *c = impl;
    uint64_t deadline = c->host->now_ns() + c->timeout_ns;
    const uint8_t *req = c->rings + (size_t)slot * c->slot_bytes;
    const bl_frame_header *q = (const bl_frame_header *)req;
    uint32_t len = q->len, did = q->decoder_id;
    int64_t decoder = c->decoder_id >= 0 ? c->decoder_id : (int64_t)did;
    if (decoder >= CUQR_MAX_DECODERS)
        return round_fail(c, BL_EINVAL, "round %llu asks for decoder_id %u, but a decoding server has decoders 0 to "
                          "%d; give decoder_id in the configuration or a smaller round decoder_id",
                          (unsigned long long)seq, did, CUQR_MAX_DECODERS - 1);
    int64_t bits = c->num_syndromes ? c->num_syndromes : (int64_t)len * 8;
    uint64_t bytes = bytes_of_bits(bits);
    if (bits == 0)
        return round_fail(c, BL_EINVAL, "round %llu has an empty payload: there are no syndromes to enqueue",
                          (unsigned long long)seq);
    if (len != bytes)
        return round_fail(c, BL_EINVAL, "round %llu's payload has %u bytes; num_syndromes=%lld takes %llu",
                          (unsigned long long)seq, len, (long long)bits, (unsigned long long)bytes);
    if (CUQR_HEADER_BYTES + CUQR_ENQUEUE_ARGS_BYTES + bytes > c->slot_size)
        return round_fail(c, BL_ETOOBIG, "round %llu's %llu bytes of syndromes do not fit an enqueue_syndromes of "
                          "slot_size=%u (at most %u bytes)", (unsigned long long)seq, (unsigned long long)bytes,
                          c->slot_size, c->slot_size - CUQR_HEADER_BYTES - CUQR_ENQUEUE_ARGS_BYTES);

    uint32_t bit = 1u << decoder;
    int was_clean = (c->clean & bit) != 0;
    c->clean &= ~bit; /* until this round has succeeded */
    int32_t rc = was_clean ? BL_OK : reset_decoder(c, decoder, seq, deadline);
    if (rc) return rc;
    uint8_t *args = c->tx + CUQR_HEADER_BYTES;
    put_u64(args, (uint64_t)decoder);
    put_u64(args + 8, seq); /* counter: the round's sequence number */
    put_u64(args + 16, 0);  /* syndrome_mapping_id: their server takes only 0 */
    put_u64(args + 24, (uint64_t)bits);
    memcpy(args + CUQR_ENQUEUE_ARGS_BYTES, req + BL_FRAME_HEADER_BYTES, bytes);
    int32_t status;
    uint32_t result_len;
    rc = call(c, CUQR_FN_ENQUEUE_SYNDROMES, "enqueue_syndromes",
                      (uint32_t)(CUQR_ENQUEUE_ARGS_BYTES + bytes), deadline, &status, &result_len);
    if (rc) return rc;
    if (status != CUQR_OK) return not_ok(c, status, "enqueue_syndromes", decoder, seq);

    put_u64(args, (uint64_t)decoder);
    put_u64(args + 8, (uint64_t)c->return_size);
    args[16] = 1; /* reset: the next shot's flips do not XOR onto this one's */
    rc = call(c, CUQR_FN_GET_CORRECTIONS, "get_corrections", CUQR_GET_ARGS_BYTES, deadline, &status, &result_len);
    if (rc) return rc;
    if (status != CUQR_OK) return not_ok(c, status, "get_corrections", decoder, seq);
    uint64_t want = bytes_of_bits(c->return_size);
    if (result_len != want) /* want fits the reply slot: open checked it */
        return round_fail(c, BL_EPEER, "the decoding server at %s answered get_corrections for decoder %lld with "
                          "%u bytes of corrections; return_size=%lld takes %llu", c->where, (long long)decoder,
                          result_len, (long long)c->return_size, (unsigned long long)want);

    uint8_t *rep = c->rings + ((size_t)c->slots + slot) * c->slot_bytes;
    bl_frame_header *r = (bl_frame_header *)rep;
    memcpy(rep + BL_FRAME_HEADER_BYTES, c->rx + CUQR_HEADER_BYTES, result_len);
    r->len = result_len;
    r->decoder_id = did;
    r->status = BL_OK;
    r->flags = 0;
    r->fn_status = 0;
    __atomic_store_n(&r->seq, seq, __ATOMIC_RELEASE); /* last: the frame is complete */
    c->clean |= bit;
    return BL_OK;
}

/* ---- lifecycle ---- */

static int32_t cuqr_open(const bl_open_args *a, void **impl, char *err, size_t n) {
    if (a->abi_version != BACKLINE_ABI_VERSION)
        return fail(err, n, BL_EABI, "cuqr was built for Backline ABI %d, the runtime is ABI %u", BACKLINE_ABI_VERSION,
                    a->abi_version);
    if (a->role != BL_CONTROLLER)
        return fail(err, n, BL_EINVAL, "cuqr serves the controller only: its coprocessor is a CUQR decoding server "
                    "(backline decoding-server, or CUDA-Q's decoding_server) that Backline does not run");
    if (a->runs_in != BL_RUNS_PROCESS && a->runs_in != BL_RUNS_ANY)
        return fail(err, n, BL_EINVAL, "cuqr reaches a decoding server in another process over UDP; this controller "
                    "expects its coprocessor in its own process");
    const bl_host_api *h = a->host;
    bl_session *s = a->session;
    const char *host = h->config_str(s, "host");
    if (!host) host = DEFAULT_HOST;
    if (!*host || strlen(host) > HOST_MAX)
        return fail(err, n, BL_EINVAL, "host=%.40s: give a host name or address of 1 to %d characters", host,
                    HOST_MAX);
    if (!h->config_str(s, "port"))
        return fail(err, n, BL_EINVAL, "cuqr needs the decoding server's port: give the coprocessor "
                    "endpoint=Endpoint(host=..., port=...) (or the keys host and port)");
    int64_t port, decoder_id, num_syndromes, return_size, slot_size;
    int32_t rc;
    if ((rc = h->config_int(s, "port", 1, 65535, 0, &port, err, n))) return rc;
    if ((rc = h->config_int(s, "decoder_id", 0, CUQR_MAX_DECODERS - 1, -1, &decoder_id, err, n))) return rc;
    if ((rc = h->config_int(s, "slot_size", CUQR_HEADER_BYTES + CUQR_ENQUEUE_ARGS_BYTES + 1, CUQR_MAX_SLOT_SIZE,
                            CUQR_DEFAULT_SLOT_SIZE, &slot_size, err, n)))
        return rc;
    int64_t max_bits = (slot_size - CUQR_HEADER_BYTES - CUQR_ENQUEUE_ARGS_BYTES) * 8;
    if ((rc = h->config_int(s, "num_syndromes", 1, max_bits, 0, &num_syndromes, err, n))) return rc;
    if (!h->config_str(s, "return_size"))
        return fail(err, n, BL_EINVAL, "cuqr needs return_size: how many observable flips the server's decoder "
                    "returns (get_corrections' return_size; a CUDA-Q server refuses any other count)");
    /* the corrections must fit the server's slot and this session's reply slot */
    int64_t room = slot_size - CUQR_HEADER_BYTES;
    if (room > (int64_t)a->slot_bytes - BL_FRAME_HEADER_BYTES) room = (int64_t)a->slot_bytes - BL_FRAME_HEADER_BYTES;
    if ((rc = h->config_int(s, "return_size", 1, room * 8, 0, &return_size, err, n))) return rc;
    if (a->check_only) return BL_OK;

    struct cuqr *c = calloc(1, sizeof *c);
    if (!c) return fail(err, n, BL_ENOMEM, "out of memory");
    c->host = h;
    c->session = s;
    snprintf(c->host_name, sizeof c->host_name, "%s", host);
    c->port = (int)port;
    snprintf(c->where, sizeof c->where, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, c->port);
    c->decoder_id = decoder_id;
    c->num_syndromes = num_syndromes;
    c->return_size = return_size;
    c->slot_size = (uint32_t)slot_size;
    c->slots = a->slots;
    c->slot_bytes = a->slot_bytes;
    c->timeout_ns = a->timeout_ns;
    c->fd = -1;
    /* a fresh start per session, so ids never repeat those of a session just before on the port */
    c->next_id = (uint32_t)(h->now_ns() ^ ((uint64_t)getpid() << 16));
    *impl = c;
    return BL_OK;
}

static int32_t cuqr_connect(void *impl, uint64_t deadline_ns, char *err, size_t n) {
    struct cuqr *c = impl;
    (void)deadline_ns; /* a UDP connect only sets the peer address; nothing waits */
    char service[8];
    snprintf(service, sizeof service, "%d", c->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *found = NULL;
    int gai = getaddrinfo(c->host_name, service, &hints, &found);
    if (gai) return fail(err, n, BL_EINVAL, "cuqr: cannot resolve the decoding server's host %s: %s", c->host_name,
                         gai_strerror(gai));
    int last = 0;
    for (struct addrinfo *ai = found; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            c->fd = fd;
            break;
        }
        last = errno;
        close(fd);
    }
    freeaddrinfo(found);
    if (c->fd < 0)
        return fail(err, n, BL_EPEER, "cuqr: cannot open a UDP socket to the decoding server at %s: %s", c->where,
                    strerror(last));
    return BL_OK;
}

static int32_t cuqr_alloc_memory(void *impl, char *err, size_t n) {
    struct cuqr *c = impl;
    size_t ring_bytes = 2 * (size_t)c->slots * c->slot_bytes; /* a multiple of BL_SLOT_ALIGN */
    c->rings = aligned_alloc(BL_SLOT_ALIGN, ring_bytes);
    c->tx = malloc(c->slot_size);
    c->rx = malloc((size_t)c->slot_size + 1);
    if (!c->rings || !c->tx || !c->rx)
        return fail(err, n, BL_ENOMEM, "cuqr: cannot allocate %zu bytes of rings and two %u-byte slots", ring_bytes,
                    c->slot_size);
    memset(c->rings, 0, ring_bytes); /* seq 0: no slot written yet */
    return BL_OK;
}

static int32_t cuqr_exchange_keys(void *impl, uint64_t deadline_ns, char *err, size_t n) {
    (void)impl, (void)deadline_ns, (void)err, (void)n;
    return BL_OK; /* the protocol has no handshake: the first round is the first message */
}

static int32_t cuqr_establish_channel(void *impl, bl_channel *ch, uint64_t deadline_ns, char *err, size_t n) {
    (void)deadline_ns, (void)err, (void)n;
    struct cuqr *c = impl;
    ch->request_ring = c->rings;
    ch->reply_ring = c->rings + (size_t)c->slots * c->slot_bytes;
    ch->slots = c->slots;
    ch->slot_bytes = c->slot_bytes;
    ch->deliver = deliver;
    ch->impl = c;
    return BL_OK;
}

static int32_t cuqr_start(void *impl, char *err, size_t n) {
    (void)impl, (void)err, (void)n;
    return BL_OK;
}

static int32_t cuqr_stop(void *impl, char *err, size_t n) {
    (void)impl, (void)err, (void)n;
    return BL_OK;
}

static void cuqr_close(void *impl) {
    struct cuqr *c = impl;
    if (!c) return;
    if (c->fd >= 0) close(c->fd);
    free(c->rings);
    free(c->tx);
    free(c->rx);
    free(c);
}

static const bl_backend backend = {
    .abi_version = BACKLINE_ABI_VERSION,
    .name = "cuqr",
    .config_keys = config_keys,
    .open = cuqr_open,
    .connect = cuqr_connect,
    .alloc_memory = cuqr_alloc_memory,
    .exchange_keys = cuqr_exchange_keys,
    .establish_channel = cuqr_establish_channel,
    .start = cuqr_start,
    .stop = cuqr_stop,
    .close = cuqr_close,
};

BL_API const bl_backend *backline_transport_backend_v1(void) { return &backend; }
