/* What a small buffered write costs with the page-cache folio it lands in
 * (BENCHMARKS.md, run 11). A buffered write caches a file in folios of about
 * its own size, so filling a 256 MiB file with FILL-byte writes leaves it in
 * FILL-sized folios; then 200,000 WRITE-byte writes at random WRITE-aligned
 * offsets are timed. Prints the fill's cost per MiB and each write's.
 *
 *   gcc -O2 -o /tmp/folio-bench scripts/folio-bench.c
 *   for fill in 4096 16384 65536; do /tmp/folio-bench $fill 8192; /tmp/folio-bench $fill 32; done
 *
 * DIR (third argument, default /tmp) holds the scratch file. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s FILL WRITE [DIR]\n", argv[0]);
        return 2;
    }
    size_t fill = strtoul(argv[1], NULL, 0), wsz = strtoul(argv[2], NULL, 0);
    size_t total = 256u << 20;
    if (fill == 0 || wsz == 0 || fill > (2u << 20) || wsz > (2u << 20)) {
        fprintf(stderr, "FILL and WRITE must be 1 byte to 2 MiB\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/folio-bench.img", argc > 3 ? argv[3] : "/tmp");
    unlink(path);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ftruncate(fd, total) != 0) {
        perror(path);
        return 1;
    }
    char *buf = aligned_alloc(4096, 2u << 20);
    memset(buf, 1, 2u << 20);
    double f0 = now();
    for (size_t o = 0; o < total; o += fill)
        if (pwrite(fd, buf, fill, o) < 0) { perror("pwrite"); return 1; }
    double fill_us = (now() - f0) / (total >> 20) * 1e6;
    fsync(fd);
    int n = 200000;
    srand(1);
    double t0 = now();
    for (int i = 0; i < n; i++) {
        size_t o = ((size_t)rand() % (total / wsz)) * wsz;
        if (pwrite(fd, buf, wsz, o) < 0) { perror("pwrite"); return 1; }
    }
    printf("fill %zu: %.1f us/MiB; write %zu: %.2f us/write\n", fill, fill_us, wsz, (now() - t0) / n * 1e6);
    close(fd);
    unlink(path);
    return 0;
}
