/*
 * backline/trust.h -- how every Backline server authenticates its peers (docs/architecture.md,
 * "Trust model"). The numbers here are the one source of truth: the C out-of-band kit
 * (backline/sdk/oob.h), the executor and the Python kit (backline_core.sdk: trust) read them.
 *
 * A handshake proves, in both directions, that the peer holds the placement owner's secret
 * (a file of 16..4096 bytes, a regular file of this user with no group/other bits, one
 * trailing newline ignored), and binds the proof to the one TCP connection it runs on:
 *
 *   S -> C   the server's nonce Ns (32 random bytes), as soon as it accepts
 *   C -> S   the client's nonce Nc and tag_C = HMAC-SHA256(K, T("client"))
 *   S -> C   tag_S = HMAC-SHA256(K, T("server")) once tag_C checked; else a refusal that
 *            names nothing the server serves, and the server closes
 *
 *   T(side) = "backline-trust/1 " side            label, ASCII, no NUL
 *          || u8 length || protocol name           "executor", "rdma", "ucx", ... (ASCII)
 *          || Ns || Nc
 *          || address(client) || address(server)   as the server sees the connection
 *          || u16 length || context                what the client asks for (its HELLO)
 *   address = the IPv6 address (an IPv4 one as ::ffff:a.b.c.d), 16 bytes || port, u16
 *
 * Integers are big-endian. A relay that forwards the bytes of one connection onto another
 * cannot reuse them: its two connections have other addresses, so neither tag checks.
 * What is not protected: the bytes after the handshake (rounds, RDMA writes, executor
 * frames) are neither encrypted nor authenticated per message.
 */
#ifndef BACKLINE_TRUST_H
#define BACKLINE_TRUST_H

#define BL_TRUST_NONCE_BYTES 32u
#define BL_TRUST_TAG_BYTES 32u             /* HMAC-SHA256 */
#define BL_TRUST_MIN_SECRET_BYTES 16u
#define BL_TRUST_MAX_SECRET_BYTES 4096u
#define BL_TRUST_ADDRESS_BYTES 18u         /* IPv6 address and port */
#define BL_TRUST_MAX_CONTEXT_BYTES 1024u
#define BL_TRUST_HANDSHAKE_TIMEOUT_MS 2000u /* a new connection's time to prove its peer holds the secret */
#define BL_TRUST_MAX_PENDING 64u            /* handshakes a server has in progress at once */
#define BL_TRUST_MAX_PENDING_PER_PEER 16u   /* ... from one peer address; the oldest makes room */
#define BL_TRUST_SECRET_HEX_BYTES 32u       /* a generated secret: 32 random bytes, written as hex */

#endif
