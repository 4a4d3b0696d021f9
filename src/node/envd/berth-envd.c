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
#include <stdlib.h>
#include <string.h>
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

// ---- run

static int child_pipe[2];

static void on_run_child(int sig) {
  (void)sig;
  int saved = errno;
  if (write(child_pipe[1], "x", 1) < 0) {
    // the pipe is full: a wake-up is already pending
  }
  errno = saved;
}

static int run_main(char **argv) {
  int failed[2];
  if (pipe2(child_pipe, O_CLOEXEC | O_NONBLOCK) < 0 || pipe2(failed, O_CLOEXEC) < 0) return 126;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_run_child;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  pid_t pid = fork();
  if (pid < 0) return 126;
  if (pid == 0) {
    signal(SIGPIPE, SIG_DFL);
    setsid();
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) {
      dup2(null, 0);
      close(null);
    }
    execvp(argv[0], argv);
    int error = errno;
    if (write(failed[1], &error, sizeof error) < 0) _exit(126);
    _exit(error == ENOENT ? 127 : 126);
  }
  close(failed[1]);
  int error;
  if (read(failed[0], &error, sizeof error) == (ssize_t)sizeof error)
    fprintf(stderr, "berth: %s: %s\n", argv[0], error == ENOENT ? "command not found" : strerror(error));
  close(failed[0]);
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
  if (argc == 3 && strcmp(argv[1], "dial") == 0) return dial_main(argv[2]);
  if (argc == 2 && strcmp(argv[1], "id") == 0) {
    printf("%u:%u\n", (unsigned)getuid(), (unsigned)getgid());
    return 0;
  }
  if (argc >= 2 && strcmp(argv[1], "guard") == 0) return guard_main(argc - 2, argv + 2);
  fprintf(stderr, "usage: berth-envd init [cmd...] | run argv... | dial PORT | id | guard PREFIX...\n");
  return 2;
}
