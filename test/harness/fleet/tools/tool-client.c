/*
 * The fleet's fake-tool client: a machine's bin/nvidia-smi (and bin/free) run this instead of a
 * Node process per call (Node's start alone costs ~85 ms of CPU here, which made the test fleet,
 * not gpu-medic, the bottleneck of every fan-out). It sends the tool name, the machine dir and its
 * argv to the fleet's tool server over a Unix socket and prints exactly what the server answers:
 * stdout bytes, stderr bytes, exit code. A simulated hang is the server never answering: this
 * process then blocks until it is killed (by the remote `timeout -k`), as a wedged nvidia-smi does.
 *
 * usage: fleet-tool-client SOCKET TOOL [ARG...]   (FLEET_MACHINE_DIR names the machine)
 * request:  TOOL \0 MACHINE_DIR \0 ARG \0 ARG \0 ...   then end of stream
 * response: "<exit> <stdout bytes> <stderr bytes>\n" then stdout, then stderr
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static void die(const char *what) {
  fprintf(stderr, "fleet tool client: %s: %s\n", what, strerror(errno));
  exit(255);
}

static void send_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("write to tool server");
    }
    buf += n;
    len -= (size_t)n;
  }
}

static void send_field(int fd, const char *s) { send_all(fd, s, strlen(s) + 1); }

static void copy_out(int from, int to, long len) {
  char buf[65536];
  while (len > 0) {
    ssize_t n = read(from, buf, len < (long)sizeof buf ? (size_t)len : sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("read from tool server");
    }
    if (n == 0) {
      fprintf(stderr, "fleet tool client: tool server closed early\n");
      exit(255);
    }
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(to, buf + off, (size_t)(n - off));
      if (w < 0) {
        if (errno == EINTR) continue;
        exit(255);
      }
      off += w;
    }
    len -= n;
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: fleet-tool-client SOCKET TOOL [ARG...]\n");
    return 255;
  }
  const char *dir = getenv("FLEET_MACHINE_DIR");
  if (dir == NULL || dir[0] == '\0') {
    fprintf(stderr, "fleet tool: FLEET_MACHINE_DIR is not set (run through the machine bin/ wrapper)\n");
    return 255;
  }
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  if (strlen(argv[1]) >= sizeof addr.sun_path) {
    fprintf(stderr, "fleet tool client: socket path too long\n");
    return 255;
  }
  strcpy(addr.sun_path, argv[1]);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) die("connect to tool server");

  send_field(fd, argv[2]);
  send_field(fd, dir);
  for (int i = 3; i < argc; i++) send_field(fd, argv[i]);
  if (shutdown(fd, SHUT_WR) < 0) die("shutdown");

  /* Header: one line of three decimal numbers. */
  char head[128];
  size_t used = 0;
  for (;;) {
    if (used == sizeof head - 1) {
      fprintf(stderr, "fleet tool client: bad header\n");
      return 255;
    }
    ssize_t n = read(fd, head + used, 1);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("read header");
    }
    if (n == 0) {
      fprintf(stderr, "fleet tool client: tool server closed without answering\n");
      return 255;
    }
    if (head[used] == '\n') break;
    used++;
  }
  head[used] = '\0';
  int code;
  long out_len, err_len;
  if (sscanf(head, "%d %ld %ld", &code, &out_len, &err_len) != 3 || out_len < 0 || err_len < 0) {
    fprintf(stderr, "fleet tool client: bad header '%s'\n", head);
    return 255;
  }
  copy_out(fd, 1, out_len);
  copy_out(fd, 2, err_len);
  close(fd);
  return code;
}
