// berth-envd: what a node runs inside every environment container (docs/environments.md).
// Static, so it needs nothing from the image (a bare busybox image works); the node mounts it
// read-only at /.berth/envd, so the environment cannot change it.
//
//   envd init [cmd...]   PID 1. Waits for the node's go (SIGUSR1 from outside the container),
//                        then runs the image's own command, if any. Reaps every orphan. Signals
//                        sent by the environment's own processes are ignored. When the image's
//                        command fails (non-zero or a signal) the container ends with its status;
//                        after a clean exit (a shell with no input) the environment lives on.
//   envd run argv...     Runs argv in a session of its own and exits with its status (128 +
//                        signal). Standard input is the caller's line: when it ends (the caller
//                        went away) the whole session is killed; so is whatever is left of the
//                        session when argv ends.
//   envd session pipe|tty:ROWS:COLS argv...
//                        An interactive `run`: standard input carries frames from the node
//                        (data for the command's input, its end, a terminal's new size), and
//                        its end, as for `run`, kills the whole session. `pipe` gives the command
//                        a pipe for input; `tty` a terminal of its own (its controlling tty),
//                        whose output comes back on standard output.
//   envd dial PORT       Connects to PORT on the environment's loopback and copies standard input
//                        to it and what it sends to standard output (a service tunnel).
//   envd id              Prints the user's uid:gid.
//   envd guard PREFIX... Adds policy-routing "prohibit" rules for each destination prefix (the
//                        egress guard; needs NET_ADMIN, so the node runs it as a privileged exec).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fib_rules.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int status_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// ---- init

static volatile sig_atomic_t go_flag, term_flag, child_flag;

static void on_init_signal(int sig, siginfo_t *info, void *ctx) {
  (void)ctx;
  if (sig == SIGCHLD) {
    child_flag = 1;
    return;
  }
  // A sender inside the container's PID namespace has a pid there; the node's has none (0).
  if (info->si_pid != 0) return;
  if (sig == SIGUSR1) go_flag = 1;
  else term_flag = 1;
}

static int init_main(int argc, char **argv) {
  sigset_t blocked, empty;
  sigemptyset(&empty);
  sigemptyset(&blocked);
  int handled[] = {SIGCHLD, SIGUSR1, SIGTERM, SIGINT, SIGHUP};
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_init_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  for (size_t i = 0; i < sizeof handled / sizeof handled[0]; i++) {
    sigaddset(&blocked, handled[i]);
    sigaction(handled[i], &sa, NULL);
  }
  sigprocmask(SIG_BLOCK, &blocked, NULL);
  pid_t main_pid = 0;
  int started = 0;
  for (;;) {
    if (term_flag) {
      if (main_pid > 0) kill(main_pid, SIGTERM);
      _exit(143);
    }
    if (go_flag && !started) {
      started = 1;
      if (argc > 0) {
        main_pid = fork();
        if (main_pid == 0) {
          sigprocmask(SIG_SETMASK, &empty, NULL);
          execvp(argv[0], argv);
          fprintf(stderr, "berth-envd: cannot run the image's command %s: %s\n", argv[0], strerror(errno));
          _exit(errno == ENOENT ? 127 : 126);
        }
      }
    }
    if (child_flag) {
      child_flag = 0;
      int status;
      pid_t pid;
      while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid != main_pid) continue;
        main_pid = 0;
        int code = status_code(status);
        if (code != 0) {
          fprintf(stderr, "berth-envd: the image's command ended with status %d\n", code);
          _exit(code);
        }
      }
    }
    sigsuspend(&empty);
  }
}

// ---- run and session: a command in a session of its own

static int child_pipe[2];

static void on_run_child(int sig) {
  (void)sig;
  int saved = errno;
  if (write(child_pipe[1], "x", 1) < 0) {
    // the pipe is full: a wake-up is already pending
  }
  errno = saved;
}

// Forks argv into a session of its own, its standard input `input` or, with `tty_name`, that
// terminal as its controlling tty and all of its standard streams. A command that cannot be run is
// reported as a shell would (on the terminal, or on stderr here) and exits 127 or 126. SIGCHLD
// wakes `child_pipe`, for a poll loop that also watches the caller.
static pid_t spawn_session(char **argv, int input, const char *tty_name) {
  int failed[2];
  if (pipe2(child_pipe, O_CLOEXEC | O_NONBLOCK) < 0 || pipe2(failed, O_CLOEXEC) < 0) return -1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_run_child;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    signal(SIGPIPE, SIG_DFL);
    setsid();
    if (tty_name) {
      int slave = open(tty_name, O_RDWR);
      if (slave < 0) _exit(126);
      ioctl(slave, TIOCSCTTY, 0);
      dup2(slave, 0);
      dup2(slave, 1);
      dup2(slave, 2);
      if (slave > 2) close(slave);
      // A terminal's programs (shells, editors) read what it is from TERM.
      setenv("TERM", getenv("TERM") && *getenv("TERM") ? getenv("TERM") : "xterm-256color", 1);
    } else {
      dup2(input, 0);
    }
    execvp(argv[0], argv);
    int error = errno;
    if (tty_name) dprintf(2, "berth: %s: %s\r\n", argv[0], error == ENOENT ? "command not found" : strerror(error));
    if (write(failed[1], &error, sizeof error) < 0) _exit(126);
    _exit(error == ENOENT ? 127 : 126);
  }
  close(failed[1]);
  int error;
  if (read(failed[0], &error, sizeof error) == (ssize_t)sizeof error && !tty_name)
    fprintf(stderr, "berth: %s: %s\n", argv[0], error == ENOENT ? "command not found" : strerror(error));
  close(failed[0]);
  return pid;
}

static int run_main(char **argv) {
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null < 0) return 126;
  pid_t pid = spawn_session(argv, null, NULL);
  close(null);
  if (pid < 0) return 126;
  struct pollfd fds[2] = {{.fd = 0, .events = POLLIN}, {.fd = child_pipe[0], .events = POLLIN}};
  char buffer[4096];
  for (;;) {
    int status;
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      kill(-pid, SIGKILL);
      return status_code(status);
    }
    if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if (fds[1].revents) {
      while (read(child_pipe[0], buffer, sizeof buffer) > 0) {
      }
    }
    if (fds[0].revents) {
      ssize_t n = read(0, buffer, sizeof buffer);
      if (n <= 0 && !(n < 0 && errno == EINTR)) {
        // The caller went away: the command's whole session goes with it.
        kill(-pid, SIGKILL);
        fds[0].fd = -1;
      }
    }
  }
  kill(-pid, SIGKILL);
  return 137;
}

// ---- session

// A frame from the node: a type byte, a 4-byte big-endian length, then the payload.
#define FRAME_DATA 'd'   // bytes for the command's input
#define FRAME_EOF 'e'    // the command's input ends
#define FRAME_RESIZE 'r' // rows, cols: two 16-bit big-endian numbers
#define FRAME_MAX 65536

struct frames {
  unsigned char buffer[5 + FRAME_MAX];
  size_t have;
};

static void set_size(int fd, unsigned rows, unsigned cols) {
  struct winsize size = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
  ioctl(fd, TIOCSWINSZ, &size);
}

static int session_main(const char *mode, char **argv) {
  int tty = 0;
  unsigned rows = 24, cols = 80;
  if (strncmp(mode, "tty:", 4) == 0) {
    tty = 1;
    if (sscanf(mode + 4, "%u:%u", &rows, &cols) != 2 || rows < 1 || cols < 1 || rows > 65535 || cols > 65535) {
      fprintf(stderr, "berth-envd: not a terminal size: %s\n", mode);
      return 2;
    }
  } else if (strcmp(mode, "pipe") != 0) {
    fprintf(stderr, "berth-envd: not a session mode: %s\n", mode);
    return 2;
  }
  int input[2] = {-1, -1}, master = -1;
  char *slave_name = NULL;
  if (tty) {
    master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0 || !(slave_name = ptsname(master))) {
      fprintf(stderr, "berth-envd: no terminal for the session: %s\n", strerror(errno));
      return 126;
    }
    set_size(master, rows, cols);
  } else if (pipe2(input, O_CLOEXEC) < 0) {
    return 126;
  }
  pid_t pid = spawn_session(argv, input[0], slave_name);
  if (pid < 0) return 126;
  // Where the command's input goes, written without blocking: a command that does not read must
  // not keep this loop from seeing the caller go away.
  int sink = tty ? master : input[1];
  if (!tty) close(input[0]);
  fcntl(sink, F_SETFL, fcntl(sink, F_GETFL) | O_NONBLOCK);
  static struct frames in;
  static unsigned char out[65536];
  size_t pending_at = 0, pending_len = 0; // payload bytes of the frame at the head of `in` not yet written
  int eof_asked = 0, master_open = tty, caller = 1;
  int status = 0, exited = 0;
  for (;;) {
    if (!exited) {
      pid_t done = waitpid(pid, &status, WNOHANG);
      if (done == pid) exited = 1;
    }
    if (exited) {
      // What the terminal still holds is the command's last output.
      if (tty) {
        ssize_t n;
        while ((n = read(master, out, sizeof out)) > 0) {
          if (write(1, out, (size_t)n) < 0) break;
        }
      }
      kill(-pid, SIGKILL);
      // Input still on its way is taken before leaving (until 150 ms pass without any, 2 s at
      // most): an engine that finds unread input in its attach socket as the process ends may
      // report a reset instead of the output (Podman).
      for (int quiet = 0, turns = 0; caller && quiet < 3 && turns < 40; turns++) {
        struct pollfd in_fd = {.fd = 0, .events = POLLIN};
        if (poll(&in_fd, 1, 50) <= 0) {
          quiet++;
          continue;
        }
        if (read(0, in.buffer, sizeof in.buffer) <= 0) break;
      }
      return status_code(status);
    }
    struct pollfd fds[4] = {
        {.fd = caller ? 0 : -1, .events = pending_len ? 0 : POLLIN},
        {.fd = child_pipe[0], .events = POLLIN},
        {.fd = pending_len ? sink : -1, .events = POLLOUT},
        {.fd = master_open ? master : -1, .events = POLLIN},
    };
    if (poll(fds, 4, -1) < 0 && errno != EINTR) break;
    if (fds[1].revents) {
      while (read(child_pipe[0], out, sizeof out) > 0) {
      }
    }
    if (fds[3].revents) {
      ssize_t n = read(master, out, sizeof out);
      // Every holder of the terminal closed it (EIO): nothing more comes until the command ends.
      if (n <= 0 && !(n < 0 && (errno == EINTR || errno == EAGAIN))) master_open = 0;
      for (ssize_t off = 0; n > 0 && off < n;) {
        ssize_t w = write(1, out + off, (size_t)(n - off));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += w;
      }
    }
    if (fds[2].revents) {
      ssize_t w = write(sink, in.buffer + 5 + pending_at, pending_len);
      if (w > 0) {
        pending_at += (size_t)w;
        pending_len -= (size_t)w;
      } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        pending_len = 0; // the command closed its input: what it did not take is dropped
      }
      if (pending_len == 0) {
        size_t frame = 5 + pending_at;
        memmove(in.buffer, in.buffer + frame, in.have - frame);
        in.have -= frame;
        pending_at = 0;
      }
    }
    if ((fds[0].revents & (POLLHUP | POLLERR)) && pending_len) {
      // The caller went away while the command was not taking its input.
      kill(-pid, SIGKILL);
      pending_len = 0;
      in.have = 0;
      caller = 0;
      continue;
    }
    if (fds[0].revents && pending_len == 0) {
      ssize_t n = read(0, in.buffer + in.have, sizeof in.buffer - in.have);
      if (n <= 0 && !(n < 0 && (errno == EINTR || errno == EAGAIN))) {
        // The caller went away: the command's whole session goes with it.
        kill(-pid, SIGKILL);
        caller = 0;
        continue;
      }
      if (n > 0) in.have += (size_t)n;
    }
    // Frames complete in the buffer are applied until one waits on the command's input.
    while (pending_len == 0 && in.have >= 5) {
      uint32_t length = ((uint32_t)in.buffer[1] << 24) | ((uint32_t)in.buffer[2] << 16) | ((uint32_t)in.buffer[3] << 8) | in.buffer[4];
      if (length > FRAME_MAX) {
        fprintf(stderr, "berth-envd: a frame of %u bytes\n", length);
        kill(-pid, SIGKILL);
        return 2;
      }
      if (in.have < 5 + length) break;
      unsigned char type = in.buffer[0];
      if (type == FRAME_DATA && length > 0 && !eof_asked) {
        pending_at = 0;
        pending_len = length;
        break;
      }
      if (type == FRAME_EOF && !eof_asked) {
        eof_asked = 1;
        if (tty) {
          // A terminal's end of input is its EOF character, at the start of a line.
          unsigned char eof = 4;
          if (write(master, &eof, 1) < 0) {
          }
        } else {
          close(sink);
          sink = -1;
        }
      } else if (type == FRAME_RESIZE && length == 4 && tty) {
        set_size(master, ((unsigned)in.buffer[5] << 8) | in.buffer[6], ((unsigned)in.buffer[7] << 8) | in.buffer[8]);
      }
      memmove(in.buffer, in.buffer + 5 + length, in.have - 5 - length);
      in.have -= 5 + length;
    }
  }
  kill(-pid, SIGKILL);
  return 137;
}

// ---- dial

struct copy {
  int from, to;
  int shutdown_to;
};

static void *copy_bytes(void *arg) {
  struct copy *c = arg;
  static __thread char buffer[65536];
  for (;;) {
    ssize_t n = read(c->from, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(c->to, buffer + off, (size_t)(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return NULL;
      off += w;
    }
  }
  if (c->shutdown_to) shutdown(c->to, SHUT_WR);
  else close(c->to);
  return NULL;
}

static int dial_main(const char *port_text) {
  char *end;
  long port = strtol(port_text, &end, 10);
  if (*end || port < 1 || port > 65535) {
    fprintf(stderr, "berth-envd: not a port: %s\n", port_text);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  int sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(sock, (struct sockaddr *)&v4, sizeof v4) < 0) {
    int error = errno;
    close(sock);
    sock = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in6 v6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    if (sock < 0 || connect(sock, (struct sockaddr *)&v6, sizeof v6) < 0) {
      fprintf(stderr, "berth-envd: cannot reach port %ld in the environment: %s\n", port, strerror(error));
      return 1;
    }
  }
  int one = 1;
  setsockopt(sock, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof one);
  struct copy in = {.from = 0, .to = sock, .shutdown_to = 1};
  struct copy out = {.from = sock, .to = 1, .shutdown_to = 0};
  pthread_t thread;
  pthread_create(&thread, NULL, copy_bytes, &in);
  copy_bytes(&out);
  pthread_join(thread, NULL);
  return 0;
}

// ---- guard

static int add_rule(int sock, const char *prefix_text) {
  char address[64];
  const char *slash = strchr(prefix_text, '/');
  size_t length = slash ? (size_t)(slash - prefix_text) : strlen(prefix_text);
  if (length >= sizeof address) return EINVAL;
  memcpy(address, prefix_text, length);
  address[length] = 0;
  unsigned char bytes[16];
  int family = strchr(address, ':') ? AF_INET6 : AF_INET;
  if (inet_pton(family, address, bytes) != 1) return EINVAL;
  int max = family == AF_INET ? 32 : 128;
  int bits = slash ? atoi(slash + 1) : max;
  if (bits < 0 || bits > max) return EINVAL;
  struct {
    struct nlmsghdr header;
    struct fib_rule_hdr rule;
    char attributes[64];
  } request;
  memset(&request, 0, sizeof request);
  request.header.nlmsg_len = NLMSG_LENGTH(sizeof(struct fib_rule_hdr));
  request.header.nlmsg_type = RTM_NEWRULE;
  request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK;
  request.rule.family = (unsigned char)family;
  request.rule.dst_len = (unsigned char)bits;
  request.rule.action = FR_ACT_PROHIBIT;
  struct rtattr *attribute = (struct rtattr *)((char *)&request + NLMSG_ALIGN(request.header.nlmsg_len));
  attribute->rta_type = FRA_DST;
  attribute->rta_len = (unsigned short)RTA_LENGTH(family == AF_INET ? 4 : 16);
  memcpy(RTA_DATA(attribute), bytes, family == AF_INET ? 4 : 16);
  request.header.nlmsg_len = NLMSG_ALIGN(request.header.nlmsg_len) + RTA_ALIGN(attribute->rta_len);
  attribute = (struct rtattr *)((char *)&request + request.header.nlmsg_len);
  attribute->rta_type = FRA_PRIORITY;
  attribute->rta_len = (unsigned short)RTA_LENGTH(4);
  unsigned int priority = 10;
  memcpy(RTA_DATA(attribute), &priority, 4);
  request.header.nlmsg_len += RTA_ALIGN(attribute->rta_len);
  if (send(sock, &request, request.header.nlmsg_len, 0) < 0) return errno;
  char reply[4096];
  ssize_t n = recv(sock, reply, sizeof reply, 0);
  if (n < 0) return errno;
  struct nlmsghdr *answer = (struct nlmsghdr *)reply;
  if (answer->nlmsg_type == NLMSG_ERROR) {
    int error = -((struct nlmsgerr *)NLMSG_DATA(answer))->error;
    return error == EEXIST ? 0 : error;
  }
  return 0;
}

static int guard_main(int count, char **prefixes) {
  int sock = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (sock < 0) {
    perror("berth-envd: netlink");
    return 1;
  }
  int failures = 0;
  for (int i = 0; i < count; i++) {
    int error = add_rule(sock, prefixes[i]);
    // An address family the environment's network lacks (no IPv6) needs no rule.
    if (error == EAFNOSUPPORT || (error && strchr(prefixes[i], ':') && error == EOPNOTSUPP)) continue;
    if (error) {
      fprintf(stderr, "berth-envd: cannot block %s: %s\n", prefixes[i], strerror(error));
      failures++;
    }
  }
  return failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "init") == 0) return init_main(argc - 2, argv + 2);
  if (argc >= 3 && strcmp(argv[1], "run") == 0) return run_main(argv + 2);
  if (argc >= 4 && strcmp(argv[1], "session") == 0) return session_main(argv[2], argv + 3);
  if (argc == 3 && strcmp(argv[1], "dial") == 0) return dial_main(argv[2]);
  if (argc == 2 && strcmp(argv[1], "id") == 0) {
    printf("%u:%u\n", (unsigned)getuid(), (unsigned)getgid());
    return 0;
  }
  if (argc >= 2 && strcmp(argv[1], "guard") == 0) return guard_main(argc - 2, argv + 2);
  fprintf(stderr, "usage: berth-envd init [cmd...] | run argv... | session pipe|tty:ROWS:COLS argv... | dial PORT | id | guard PREFIX...\n");
  return 2;
}
