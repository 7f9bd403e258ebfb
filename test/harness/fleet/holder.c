/*
 * fleet-holder: the one real process the test fleet runs for simulated workloads.
 *
 *   FLEET_MODE=holder (default)  a GPU holder or a bystander: opens + mmaps the device files in
 *                                FLEET_DEVS (colon-separated), logs every catchable signal it gets to
 *                                FLEET_SIGLOG, prints "READY <pid> <host-pid>" and sleeps until killed.
 *   FLEET_MODE=init              a container's PID 1: reaps orphans forever (with FLEET_DEVS also a
 *                                GPU holder: opens the devices and logs signals, as a holder does).
 *   FLEET_MODE=launch            starts a holder on a chosen PID: FLEET_AT_HOST (host PID) and, with
 *                                FLEET_NS_PID (host PID of a container's init), FLEET_AT_CT (its PID
 *                                in that container), via /proc/sys/kernel/ns_last_pid in each PID
 *                                namespace; retries while something else takes the PID first, and
 *                                then waits for it and dies as it died (as nsenter does).
 *
 *   FLEET_PARENT_ARGV=<title>    (holder mode) the process becomes the holder's parent under that
 *                                title (a launcher such as `python3 -m sglang.launch_server …` above
 *                                its TP ranks): it forks the holder, which prints READY as usual, then
 *                                re-execs itself as FLEET_MODE=wait, holds no device, and dies as the
 *                                holder died.
 *
 * The process title is FLEET_ARGV (e.g. "sglang::scheduler_TP0"): the program re-execs itself with it,
 * and comm is set to basename(argv[0]) so `ps -o comm` and `fuser -v` show it too.
 * FLEET_COMM_HEX (hex bytes) sets another comm instead (names with spaces, ") " or bytes that are not UTF-8).
 * Other env: FLEET_HOLDER_ID (tag for the signal log), FLEET_IGNORE_TERM=1, FLEET_UID/FLEET_GID
 * (drop privileges after opening the signal log, before opening the devices), FLEET_HOSTPROC (the
 * host's /proc, to print our host PID).
 *
 * A stuck holder (FLEET_STUCK, in holder mode), for the watchdog's holder_stuck alert; it turns
 * once the file FLEET_STUCK_GO exists (the fleet creates it after registering the holder):
 *   Z  a real zombie holding the devices: the process forks, the child is the holder (it prints
 *      READY), and when told it exits while its parent (the "keeper") never reaps it.
 *   D  real uninterruptible sleep: the holder vfork()s and its child never execs or exits, so the
 *      parent waits in the kernel (state D, killable only by SIGKILL). The child dies with it
 *      (PR_SET_PDEATHSIG); killing the child lets the parent run on (back to S).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int siglog_fd = -1;
static int ignore_term = 0;
static char holder_id[64] = "?";

static void fmt_u64(char *buf, size_t *len, unsigned long long v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + (v % 10));
    v /= 10;
  } while (v > 0 && n < 23);
  while (n > 0) buf[(*len)++] = tmp[--n];
}

/* Async-signal-safe: one write() of "<ms> <id> <signo> <sender-pid>\n". */
static void on_signal(int sig, siginfo_t *info, void *ctx) {
  (void)ctx;
  if (siglog_fd >= 0) {
    char line[160];
    size_t len = 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    fmt_u64(line, &len, (unsigned long long)ts.tv_sec * 1000ULL + (unsigned long long)(ts.tv_nsec / 1000000));
    line[len++] = ' ';
    for (const char *p = holder_id; *p != '\0' && len < 100; p++) line[len++] = *p;
    line[len++] = ' ';
    fmt_u64(line, &len, (unsigned long long)sig);
    line[len++] = ' ';
    fmt_u64(line, &len, (unsigned long long)(info != NULL && info->si_pid > 0 ? info->si_pid : 0));
    line[len++] = '\n';
    ssize_t w = write(siglog_fd, line, len);
    (void)w;
  }
  if (sig == SIGTERM && ignore_term) return;
  signal(sig, SIG_DFL);
  raise(sig); /* delivered when the handler returns: the process dies by this very signal */
}

static void set_comm(const char *argv0) {
  const char *base = strrchr(argv0, '/');
  base = base != NULL ? base + 1 : argv0;
  /* FLEET_COMM_HEX: a comm of any bytes (spaces, ") ", not UTF-8), hex-encoded to pass the environment. */
  const char *hex = getenv("FLEET_COMM_HEX");
  char comm[16];
  size_t n = 0;
  if (hex != NULL) {
    for (; n < 15 && hex[2 * n] != '\0' && hex[2 * n + 1] != '\0'; n++) {
      unsigned v = 0;
      if (sscanf(hex + 2 * n, "%2x", &v) != 1) break;
      comm[n] = (char)v;
    }
    comm[n] = '\0';
    if (n > 0) base = comm;
  }
  prctl(PR_SET_NAME, base, 0, 0, 0);
}

/* Waits (polling) until `path` exists. */
static void wait_for_file(const char *path) {
  struct stat st;
  while (stat(path, &st) != 0) usleep(20000);
}

static long read_host_pid(long fallback) {
  const char *hostproc = getenv("FLEET_HOSTPROC");
  if (hostproc == NULL || hostproc[0] == '\0') return fallback;
  char path[512];
  snprintf(path, sizeof path, "%s/self/stat", hostproc);
  FILE *f = fopen(path, "r");
  long v = fallback;
  if (f == NULL || fscanf(f, "%ld", &v) != 1) {
    fprintf(stderr, "fleet-holder: cannot read %s\n", path);
    exit(3);
  }
  fclose(f);
  return v;
}

static int run_stuck(const char *kind, const char *go) {
  if (strcmp(kind, "Z") == 0) {
    pid_t c = fork();
    if (c < 0) return 4;
    if (c == 0) {
      printf("READY %d %ld\n", (int)getpid(), read_host_pid((long)getpid()));
      fflush(stdout);
      wait_for_file(go);
      _exit(0); /* the keeper never reaps us: a zombie that still "holds" */
    }
    /* The keeper: never waits, so the child stays a zombie until the keeper dies. */
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 1);
    for (;;) pause();
  }
  printf("READY %d %ld\n", (int)getpid(), read_host_pid((long)getpid()));
  fflush(stdout);
  wait_for_file(go);
  pid_t parent = getpid();
  pid_t c = vfork();
  if (c == 0) {
    /* The child shares the parent's memory and never returns from here (no exec, no exit). */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != parent) _exit(0);
    for (;;) pause();
  }
  /* Here only after the child died: the holder runs on, as a plain holder. */
  for (;;) pause();
}

static int run_init(void) {
  for (;;) {
    pid_t pid = waitpid(-1, NULL, 0);
    if (pid < 0) sleep(1);
  }
  return 0;
}


/* The host's ns_last_pid, opened before any setns: inside an LXC container /proc/sys is read-only.
 * A write sets the last PID of the writer's own PID namespace (the kernel looks at the writer). */
static int last_pid_fd = -1;

static int write_last_pid(long v) {
  int fd = last_pid_fd >= 0 ? last_pid_fd : open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%ld", v);
  ssize_t w = pwrite(fd, buf, (size_t)n, 0);
  if (fd != last_pid_fd) close(fd);
  return w == n ? 0 : -1;
}

/* FLEET_CGROUPS: colon-separated cgroup dirs the launcher joins (a real LXC container's, one per hierarchy). */
static void join_cgroups(void) {
  const char *list = getenv("FLEET_CGROUPS");
  if (list == NULL || list[0] == '\0') return;
  char *copy = strdup(list);
  for (char *tok = strtok(copy, ":"); tok != NULL; tok = strtok(NULL, ":")) {
    char path[600];
    snprintf(path, sizeof path, "%s/cgroup.procs", tok);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t w = write(fd, "0", 1);
      (void)w;
      close(fd);
    }
  }
  free(copy);
}

/* Innermost NSpid of a host PID, read through the host's /proc (dirfd opened before any setns). */
static long inner_pid(int hostproc, pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "%d/status", (int)pid);
  int fd = openat(hostproc, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  char *line = strstr(buf, "\nNSpid:");
  if (line == NULL) return -1;
  char *end = strchr(line + 1, '\n');
  if (end != NULL) *end = '\0';
  char *last = strrchr(line, '\t');
  char *sp = strrchr(line, ' ');
  if (sp != NULL && (last == NULL || sp > last)) last = sp;
  return last == NULL ? -1 : atol(last + 1);
}

static int run_launch(char **argv) {
  const char *ns_pid = getenv("FLEET_NS_PID");
  const char *at_host_s = getenv("FLEET_AT_HOST");
  const char *at_ct_s = getenv("FLEET_AT_CT");
  long at_host = at_host_s != NULL ? atol(at_host_s) : 0;
  long at_ct = at_ct_s != NULL ? atol(at_ct_s) : 0;
  if (at_host < 2) {
    fprintf(stderr, "fleet-launch: FLEET_AT_HOST must be a PID > 1\n");
    return 4;
  }
  int hostproc = open("/proc", O_DIRECTORY | O_RDONLY | O_CLOEXEC);
  last_pid_fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
  join_cgroups();
  /* FLEET_NS_USER=1 (an unprivileged LXC container): the holder joins the container's user namespace
   * as its root, in the child, after the fork: the launcher keeps the host's privileges to set the
   * host's ns_last_pid. */
  int user_fd = -1;
  const char *ns_user = getenv("FLEET_NS_USER");
  if (ns_pid != NULL && ns_pid[0] != '\0' && ns_user != NULL && strcmp(ns_user, "1") == 0) {
    char path[128];
    snprintf(path, sizeof path, "/proc/%s/ns/user", ns_pid);
    user_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (user_fd < 0) {
      perror("fleet-launch: open user ns");
      return 4;
    }
  }
  if (ns_pid != NULL && ns_pid[0] != '\0') {
    const char *kinds[] = {"pid", "mnt", "uts"};
    const int flags[] = {CLONE_NEWPID, CLONE_NEWNS, CLONE_NEWUTS};
    int fds[3];
    for (int i = 0; i < 3; i++) {
      char path[128];
      snprintf(path, sizeof path, "/proc/%s/ns/%s", ns_pid, kinds[i]);
      fds[i] = open(path, O_RDONLY | O_CLOEXEC);
      if (fds[i] < 0) {
        perror("fleet-launch: open ns");
        return 4;
      }
    }
    for (int i = 0; i < 3; i++) {
      if (setns(fds[i], flags[i]) != 0) {
        perror("fleet-launch: setns");
        return 4;
      }
      close(fds[i]);
    }
    if (chdir("/") != 0) return 4;
  }
  unsetenv("FLEET_AT_HOST");
  unsetenv("FLEET_AT_CT");
  unsetenv("FLEET_NS_PID");
  unsetenv("FLEET_NS_USER");
  unsetenv("FLEET_CGROUPS");
  setenv("FLEET_MODE", "holder", 1);
  for (int attempt = 0; attempt < 500; attempt++) {
    if (at_ct > 1) {
      /* Only a process inside the container's PID namespace may set its ns_last_pid. */
      pid_t c = fork();
      if (c == 0) _exit(write_last_pid(at_ct - 1) == 0 ? 0 : 1);
      int st = 0;
      waitpid(c, &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "fleet-launch: cannot set the container's ns_last_pid\n");
        return 4;
      }
    }
    int go[2];
    if (pipe(go) != 0) return 4;
    if (write_last_pid(at_host - 1) != 0) {
      perror("fleet-launch: ns_last_pid");
      return 4;
    }
    pid_t c = fork();
    if (c < 0) return 4;
    if (c == 0) {
      close(go[1]);
      char b = 0;
      if (read(go[0], &b, 1) != 1 || b != 'g') _exit(0);
      close(go[0]);
      if (user_fd >= 0) {
        if (setns(user_fd, CLONE_NEWUSER) != 0 || setgroups(0, NULL) != 0 || setgid(0) != 0 || setuid(0) != 0) {
          perror("fleet-launch: join the container's user namespace");
          _exit(2);
        }
      }
      execv("/proc/self/exe", argv);
      _exit(2);
    }
    close(go[0]);
    int ok = c == (pid_t)at_host && (at_ct <= 1 || inner_pid(hostproc, c) == at_ct);
    ssize_t w = write(go[1], ok ? "g" : "n", 1);
    (void)w;
    close(go[1]);
    if (!ok) {
      waitpid(c, NULL, 0);
      continue;
    }
    int st = 0;
    while (waitpid(c, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(st)) {
      signal(WTERMSIG(st), SIG_DFL);
      raise(WTERMSIG(st));
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
  }
  fprintf(stderr, "fleet-launch: PID %ld (container PID %ld) was taken by something else every time\n", at_host, at_ct);
  return 5;
}

/* FLEET_ARGV ("\x1f"-separated) = the argv to show: re-exec ourselves under it (nsenter can't set argv[0]). */
static void reexec_with_title(void) {
  const char *spec = getenv("FLEET_ARGV");
  if (spec == NULL || spec[0] == '\0') return;
  char *copy = strdup(spec);
  char *args[64];
  int n = 0;
  for (char *tok = strtok(copy, "\x1f"); tok != NULL && n < 63; tok = strtok(NULL, "\x1f")) args[n++] = tok;
  args[n] = NULL;
  unsetenv("FLEET_ARGV");
  execv("/proc/self/exe", args);
  perror("fleet-holder: re-exec");
  exit(2);
}

/* FLEET_MODE=wait: a holder's parent. Waits for its child (the holder) and dies as it died. */
static int run_wait(void) {
  int st = 0;
  pid_t c;
  while ((c = waitpid(-1, &st, 0)) < 0 && errno == EINTR) {
  }
  if (c < 0) return 0;
  if (WIFSIGNALED(st)) {
    signal(WTERMSIG(st), SIG_DFL);
    raise(WTERMSIG(st));
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

/* FLEET_PARENT_ARGV set: fork the holder (this very program, without it), then become its parent under that title. */
static void become_parent(char **argv) {
  const char *parent = getenv("FLEET_PARENT_ARGV");
  if (parent == NULL || parent[0] == '\0') return;
  char *title = strdup(parent);
  unsetenv("FLEET_PARENT_ARGV");
  pid_t c = fork();
  if (c < 0) {
    perror("fleet-holder: fork");
    exit(2);
  }
  if (c == 0) {
    execv("/proc/self/exe", argv);
    _exit(2);
  }
  setenv("FLEET_ARGV", title, 1);
  setenv("FLEET_MODE", "wait", 1);
  unsetenv("FLEET_DEVS");
  execv("/proc/self/exe", argv);
  perror("fleet-holder: re-exec as parent");
  exit(2);
}

int main(int argc, char **argv) {
  (void)argc;
  become_parent(argv);
  reexec_with_title();
  const char *mode = getenv("FLEET_MODE");
  if (mode != NULL && strcmp(mode, "wait") == 0) return run_wait();
  if (argv[0] != NULL) set_comm(argv[0]);
  if (mode != NULL && strcmp(mode, "launch") == 0) return run_launch(argv);
  int init_mode = mode != NULL && strcmp(mode, "init") == 0;
  if (init_mode && getenv("FLEET_DEVS") == NULL) return run_init();

  /* Join the container's cgroup (as lxc-attach moves attached processes), best effort. */
  const char *cgroup = getenv("FLEET_CGROUP");
  if (cgroup != NULL && cgroup[0] != '\0') {
    char path[512];
    snprintf(path, sizeof path, "%s/cgroup.procs", cgroup);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t w = write(fd, "0", 1);
      (void)w;
      close(fd);
    }
  }

  struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);

  const char *id = getenv("FLEET_HOLDER_ID");
  if (id != NULL) snprintf(holder_id, sizeof holder_id, "%s", id);
  const char *ign = getenv("FLEET_IGNORE_TERM");
  ignore_term = ign != NULL && strcmp(ign, "1") == 0;

  const char *siglog = getenv("FLEET_SIGLOG");
  if (siglog != NULL && siglog[0] != '\0') {
    siglog_fd = open(siglog, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (siglog_fd < 0) {
      perror("fleet-holder: open signal log");
      return 2;
    }
  }

  const char *gid = getenv("FLEET_GID");
  const char *uid = getenv("FLEET_UID");
  if (uid != NULL && uid[0] != '\0' && setgroups(0, NULL) != 0) {
    perror("fleet-holder: setgroups");
    return 2;
  }
  if (gid != NULL && gid[0] != '\0' && setgid((gid_t)atoi(gid)) != 0) {
    perror("fleet-holder: setgid");
    return 2;
  }
  if (uid != NULL && uid[0] != '\0' && setuid((uid_t)atoi(uid)) != 0) {
    perror("fleet-holder: setuid");
    return 2;
  }
  /* As a process that user started itself: its /proc/<pid>/fd readable by that user (setuid clears it). */
  prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  const int caught[] = {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGTERM, SIGALRM, SIGABRT};
  for (size_t i = 0; i < sizeof caught / sizeof caught[0]; i++) sigaction(caught[i], &sa, NULL);

  /* Open every device the process "uses" (as CUDA does: read-write, mapped), after dropping privileges. */
  const char *devs = getenv("FLEET_DEVS");
  if (devs != NULL && devs[0] != '\0') {
    char *copy = strdup(devs);
    for (char *tok = strtok(copy, ":"); tok != NULL; tok = strtok(NULL, ":")) {
      int fd = open(tok, O_RDWR);
      if (fd < 0) {
        fprintf(stderr, "fleet-holder: open %s: %s\n", tok, strerror(errno));
        return 3;
      }
      void *map = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
      if (map == MAP_FAILED) {
        fprintf(stderr, "fleet-holder: mmap %s: %s\n", tok, strerror(errno));
        return 3;
      }
    }
    free(copy);
  }

  /* Our PID in the host's namespace: FLEET_HOSTPROC is the host's /proc (bind-mounted in a container). */
  long host_pid = (long)getpid();
  const char *hostproc = getenv("FLEET_HOSTPROC");
  if (hostproc != NULL && hostproc[0] != '\0') {
    char path[512];
    snprintf(path, sizeof path, "%s/self/stat", hostproc);
    FILE *f = fopen(path, "r");
    if (f == NULL || fscanf(f, "%ld", &host_pid) != 1) {
      fprintf(stderr, "fleet-holder: cannot read %s\n", path);
      return 3;
    }
    fclose(f);
  }
  if (init_mode) {
    /* A container's PID 1 that holds a GPU: said ready on stdout by the container's setup script. */
    return run_init();
  }
  const char *stuck = getenv("FLEET_STUCK");
  const char *go = getenv("FLEET_STUCK_GO");
  if (stuck != NULL && go != NULL && (strcmp(stuck, "Z") == 0 || strcmp(stuck, "D") == 0)) return run_stuck(stuck, go);
  printf("READY %d %ld\n", (int)getpid(), host_pid);
  fflush(stdout);
  for (;;) pause();
}
