/* The header of a message on a byte stream and its big-endian integers (backline/sdk/stream_frame.h). */
#include <backline/sdk/stream_frame.h>

void bl_be_put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}
void bl_be_put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (24 - 8 * i));
}
void bl_be_put64(uint8_t *p, uint64_t v) {
    bl_be_put32(p, (uint32_t)(v >> 32));
    bl_be_put32(p + 4, (uint32_t)v);
}
uint16_t bl_be_get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
uint32_t bl_be_get32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
uint64_t bl_be_get64(const uint8_t *p) { return (uint64_t)bl_be_get32(p) << 32 | bl_be_get32(p + 4); }

void bl_stream_header_put(uint8_t *p, uint32_t magic, uint16_t version, uint16_t type, uint32_t body_bytes) {
    bl_be_put32(p, magic);
    bl_be_put16(p + 4, version);
    bl_be_put16(p + 6, type);
    bl_be_put32(p + 8, body_bytes);
}

bl_stream_header bl_stream_header_get(const uint8_t *p) {
    return (bl_stream_header){
        .magic = bl_be_get32(p), .version = bl_be_get16(p + 4), .type = bl_be_get16(p + 6), .body_bytes = bl_be_get32(p + 8)};
}
