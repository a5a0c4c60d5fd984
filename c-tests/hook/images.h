/* Module images as nvcc lays them out, for the tests of what their
 * __device__ globals take: a cubin (a 64-bit little-endian ELF, System V
 * ABI: Elf64_Ehdr, Elf64_Shdr) and a fat binary (fatBinaryHeader, then
 * one entry per target; an entry's 64-byte header as CUDA 11 to 13 write
 * it, not in CUDA's public headers: kind u16 at 0 (1 PTX, 2 cubin), its
 * size u32 at 4, the payload's size u64 at 8, a compressed payload's size
 * u32 at 16, flags u64 at 40 (0x2000: LZ4, 0x8000: Zstandard), the
 * uncompressed size u64 at 56). */
#ifndef IMAGES_H
#define IMAGES_H

#include <stddef.h>
#include <string.h>

static void put_le(unsigned char *p, unsigned long long v, int n) {
  for (int i = 0; i < n; i++, v >>= 8)
    p[i] = (unsigned char)v;
}

/* A cubin in `buf` (`cap` bytes) whose .nv.global takes `global` bytes and
 * .nv.global.init `init`, its section headers last; its length (0: no
 * room). */
static size_t make_cubin(unsigned char *buf, size_t cap, unsigned long long global,
                         unsigned long long init) {
  static const char names[] = "\0.shstrtab\0.text.k\0.nv.global\0.nv.global.init\0.nv.shared.k";
  static const unsigned name_at[] = {0, 1, 11, 19, 30, 46};
  const unsigned long long sizes[] = {0, sizeof names, 128, global, init, 4096};
  const size_t nsec = sizeof name_at / sizeof name_at[0], shoff = 64 + sizeof names;
  if (cap < shoff + nsec * 64)
    return 0;
  memset(buf, 0, shoff + nsec * 64);
  memcpy(buf, "\x7f" "ELF", 4);
  buf[4] = 2, buf[5] = 1, buf[6] = 1; /* ELFCLASS64, ELFDATA2LSB, EV_CURRENT */
  put_le(buf + 0x10, 2, 2);           /* ET_EXEC */
  put_le(buf + 0x12, 190, 2);         /* EM_CUDA */
  put_le(buf + 0x28, shoff, 8);
  put_le(buf + 0x34, 64, 2);
  put_le(buf + 0x3A, 64, 2);
  put_le(buf + 0x3C, nsec, 2);
  put_le(buf + 0x3E, 1, 2);
  memcpy(buf + 64, names, sizeof names);
  for (size_t i = 0; i < nsec; i++) {
    unsigned char *sh = buf + shoff + i * 64;
    put_le(sh, name_at[i], 4);
    put_le(sh + 4, i == 1 ? 3 : i == 3 || i == 5 ? 8 : 1, 4); /* STRTAB, NOBITS, PROGBITS */
    put_le(sh + 0x18, i == 1 ? 64 : 0, 8);
    put_le(sh + 0x20, sizes[i], 8);
  }
  return shoff + nsec * 64;
}

/* `data` as an LZ4 block of literals only (lz4's block format: a valid
 * block without a compressor), in `out`; its length. */
static size_t lz4_literals(unsigned char *out, const unsigned char *data, size_t n) {
  size_t o = 0;
  out[o++] = (unsigned char)((n < 15 ? n : 15) << 4);
  if (n >= 15) {
    size_t rest = n - 15;
    for (; rest >= 255; rest -= 255)
      out[o++] = 255;
    out[o++] = (unsigned char)rest;
  }
  memcpy(out + o, data, n);
  return o + n;
}

/* `data` as a Zstandard frame (RFC 8878) of raw blocks (a valid frame
 * without a compressor: an 8-byte content size, a single segment, blocks
 * of 128 KiB at most), in `out`; its length. */
static size_t zstd_raw(unsigned char *out, const unsigned char *data, size_t n) {
  size_t o = 0;
  put_le(out, 0xFD2FB528u, 4);
  out[4] = 0xE0;
  put_le(out + 5, n, 8);
  o = 13;
  size_t at = 0;
  do {
    size_t block = n - at < (128u << 10) ? n - at : (128u << 10);
    put_le(out + o, (unsigned long long)block << 3 | (at + block == n), 3);
    memcpy(out + o + 3, data + at, block);
    o += 3 + block, at += block;
  } while (at < n);
  return o;
}

/* How a fat binary entry's payload is stored. */
enum { STORED, LZ4, ZSTD };

/* A fat binary being built in `buf`: fatbin_begin, fatbin_add per entry. */
static size_t fatbin_begin(unsigned char *buf) {
  memset(buf, 0, 16);
  put_le(buf, 0xBA55ED50u, 4);
  put_le(buf + 4, 1, 2);
  put_le(buf + 6, 16, 2);
  return 16;
}
/* An entry of `kind` holding `n` bytes at `data` (stored as `how`: STORED,
 * LZ4, ZSTD) appended at `len` (`cap` bytes in all); the new length (0: no
 * room). */
static size_t fatbin_add(unsigned char *buf, size_t len, size_t cap, int kind, int how,
                         const void *data, size_t n) {
  unsigned char *e = buf + len, *payload = e + 64;
  if (cap < len + 64 + n + n / 255 + 3 * (n >> 17) + 16 + 8)
    return 0;
  memset(e, 0, 64);
  size_t stored = how == LZ4    ? lz4_literals(payload, data, n)
                  : how == ZSTD ? zstd_raw(payload, data, n)
                                : (memcpy(payload, data, n), n);
  int packed = how != STORED;
  size_t padded = (stored + 7) & ~(size_t)7;
  memset(payload + stored, 0, padded - stored);
  put_le(e, (unsigned)kind, 2);
  put_le(e + 2, 0x0101, 2);
  put_le(e + 4, 64, 4);
  put_le(e + 8, padded, 8);
  put_le(e + 16, packed ? stored : 0, 4);
  put_le(e + 28, 86, 4); /* sm_86 */
  put_le(e + 40, 0x11 | (how == LZ4 ? 0x2000 : how == ZSTD ? 0x8000 : 0), 8); /* 64-bit, Linux */
  put_le(e + 56, packed ? n : 0, 8);
  len += 64 + padded;
  put_le(buf + 8, len - 16, 8);
  return len;
}

#endif
