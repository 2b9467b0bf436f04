// Appends N records of SIZE bytes to a new file with pwrite at growing offsets, the file
// (a) growing with each write, (b) pre-sized with ftruncate (sparse), (c) fallocated;
// prints the thread CPU time and wall time per record. usage: prealloc MODE SIZE N DIR
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static double now(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
  const char *mode = argv[1]; long size = atol(argv[2]); long n = atol(argv[3]);
  char path[4096]; snprintf(path, sizeof path, "%s/prealloc-%d", argv[4], getpid());
  char *buf = malloc(size); for (long i = 0; i < size; i++) buf[i] = (char)(i * 2654435761u >> 13);
  int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0600);
  if (fd < 0) { perror("open"); return 1; }
  double c0 = now(CLOCK_THREAD_CPUTIME_ID), w0 = now(CLOCK_MONOTONIC);
  // The sizing is timed with the writes: a store pays it once per block.
  if (!strcmp(mode, "truncate") && ftruncate(fd, size * n)) { perror("ftruncate"); return 1; }
  if (!strcmp(mode, "fallocate") && fallocate(fd, 0, 0, size * n)) { perror("fallocate"); return 1; }
  for (long i = 0; i < n; i++) {
    buf[0] = (char)i;
    if (pwrite(fd, buf, size, i * size) != size) { perror("pwrite"); return 1; }
  }
  double c1 = now(CLOCK_THREAD_CPUTIME_ID), w1 = now(CLOCK_MONOTONIC);
  printf("%-10s size=%ld n=%ld cpu/rec=%.1f us wall/rec=%.1f us\n", mode, size, n, (c1 - c0) * 1e6 / n, (w1 - w0) * 1e6 / n);
  close(fd); unlink(path);
  return 0;
}
