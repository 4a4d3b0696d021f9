// berth-envd: what a node runs inside every environment container (docs/environments.md).
// Static, so it needs nothing from the image (a bare busybox image works). The node mounts a folder
// holding only this program read-only at /.berth, and runs /.berth/envd: a mount point, which
// nothing inside (root included: it lacks CAP_SYS_ADMIN) can rename, replace, unmount or write to.
// Every step is non-dumpable: the environment's processes, root included (no CAP_SYS_PTRACE), cannot
// open any of them in /proc (their memory, descriptors) to read or forge what they carry.
//
//   envd init [cmd...]   PID 1. Waits for the node's go (SIGUSR1 from outside the container),
//                        then runs the image's own command, if any. Reaps every orphan. Signals
//                        sent by the environment's own processes are ignored. When the image's
//                        command fails (non-zero or a signal) the container ends with its status;
//                        after a clean exit (a shell with no input) the environment lives on.
//                        Ends at once (ENVD_MISPLACED) when /.berth is not a folder: an image's
//                        link there sends the mount to its target, leaving the path itself to the
//                        environment to replace.
//   envd serve           Every command the node runs in the environment, over one line (standard
//                        input and output, frames below): each in a session of its own, as the
//                        image's user, its input empty, a pipe or a terminal of its own (its
//                        controlling tty); what is left of its session is killed when it ends. Its
//                        output is read only as far as the node's credit goes. The line's end (the
//                        node went away) kills every command it started.
//   envd dial PORT       Connects to PORT on the environment's loopback and copies standard input
//                        to it and what it sends to standard output (a service tunnel). Ends as
//                        soon as nothing reads its output any more (the node went away). The
//                        node runs it through the engine where it cannot enter the container.
//   envd dialer NAME PID The node's standing dialler of one container, run by the node from its own
//                        copy, as root with the container's network and mount namespaces on
//                        descriptors 3 and 4: listens on the host's abstract Unix socket NAME, then
//                        in those namespaces as nobody connects to a port there for each of the
//                        node's connections (a child each). Ends with PID (the container's first
//                        process) or the node.
//   envd id              Prints the user's uid:gid.
//   envd guard PREFIX... Adds policy-routing "prohibit" rules for each destination prefix (the
//                        egress guard; needs NET_ADMIN, so the node runs it as a privileged exec).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/fib_rules.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
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

// init's exit when the image's /.berth is not a folder (runtime.ts ENVD_MISPLACED says why).
#define ENVD_MISPLACED 120

static int init_main(int argc, char **argv) {
  struct stat place;
  if (lstat("/.berth", &place) < 0 || !S_ISDIR(place.st_mode)) {
    fprintf(stderr, "berth-envd: the image's /.berth is not a folder (a link or a file): berth-envd's place is refused\n");
    _exit(ENVD_MISPLACED);
  }
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

// ---- serve: every command of the node over one line

static int child_pipe[2];

// SIGCHLD wakes serve's poll loop through this pipe.
static void on_child(int sig) {
  (void)sig;
  int saved = errno;
  if (write(child_pipe[1], "x", 1) < 0) {
    // the pipe is full: a wake-up is already pending
  }
  errno = saved;
}

static void set_size(int fd, unsigned rows, unsigned cols) {
  struct winsize size = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
  ioctl(fd, TIOCSWINSZ, &size);
}

// Frames both ways are a type byte, a 4-byte big-endian length and a payload whose first four bytes
// (big-endian) are the command's id. From the node:
//   's' spawn: then NUL-terminated MODE (none | pipe | tty:ROWS:COLS), WORKDIR ("": the container's)
//       and argv; the command starts with no credit for its output
//   'd' bytes for its input   'e' its input ends   'r' resize: rows, cols (16 bits each)
//   'k' kill its whole session   'c' credit: 32 bits more of output it may send
// To the node:
//   '1' its stdout   '2' its stderr   'a' input taken: 32 bits more written to the command
//   'x' it ended: its status (32 bits), after the last of its output
// A frame the node never sends (unknown, malformed, too long, an id in use, input beyond INPUT_MAX)
// ends serve, and with it every command: the node starts another.
//
// serve is not dumpable (main): the environment's processes cannot open its descriptors in /proc and
// so cannot read or forge another command's frames.

#define SERVE_PAYLOAD_MAX (512 * 1024) // a spawn's argv: the node allows 64 Ki characters
#define INPUT_MAX (256 * 1024)         // a command's input held here (the node's SERVE_INPUT_WINDOW)
#define COMMANDS_MAX 1024
#define CREDIT_MAX ((int64_t)1 << 40)
#define OUTPUT_CHUNK 65536

struct command {
  uint32_t id;
  pid_t pid;
  int exited, status, killed;
  int tty;     // its terminal's master: input and output both
  int tty_out_ended; // every holder of the terminal closed it: nothing more to read until it ends
  int in;      // the write end of its input (pipe mode), -1 when none or closed
  int out, err; // read ends of its output, -1 once at their end
  unsigned char *input;
  size_t input_len;
  int eof_asked, eof_done;
  int64_t credit;
};

static struct command *commands[COMMANDS_MAX];
static int command_count;
static struct rlimit files_limit;

static void put32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

static uint32_t get32(const unsigned char *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void kill_all(void);

static void write_all(int fd, const void *data, size_t length) {
  const unsigned char *p = data;
  while (length > 0) {
    ssize_t w = write(fd, p, length);
    if (w < 0 && errno == EINTR) continue;
    // The node's line is gone: so is every command it started.
    if (w <= 0) {
      kill_all();
      _exit(0);
    }
    p += w;
    length -= (size_t)w;
  }
}

static void send_frame(char type, uint32_t id, const void *data, size_t length) {
  unsigned char head[9];
  head[0] = (unsigned char)type;
  put32(head + 1, (uint32_t)(4 + length));
  put32(head + 5, id);
  if (length <= 4096) {
    unsigned char frame[9 + 4096];
    memcpy(frame, head, 9);
    memcpy(frame + 9, data, length);
    write_all(1, frame, 9 + length);
  } else {
    write_all(1, head, 9);
    write_all(1, data, length);
  }
}

static void send_number(char type, uint32_t id, uint32_t n) {
  unsigned char payload[4];
  put32(payload, n);
  send_frame(type, id, payload, 4);
}

// Kills a running command's whole session, and the command itself: right after the fork it may not
// have a session of its own yet.
static void end_session(struct command *c) {
  if (c->exited) return;
  kill(-c->pid, SIGKILL);
  kill(c->pid, SIGKILL);
}

static void kill_all(void) {
  for (int i = 0; i < command_count; i++) end_session(commands[i]);
}

static void serve_fail(const char *why) {
  fprintf(stderr, "berth-envd: %s\n", why);
  kill_all();
  _exit(2);
}

static struct command *find_command(uint32_t id) {
  for (int i = 0; i < command_count; i++)
    if (commands[i]->id == id) return commands[i];
  return NULL;
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

// A command that could not start: said on its stderr as a shell would, with 126 (127: not found).
static void refuse(uint32_t id, const char *what, int error) {
  char message[512];
  int n = snprintf(message, sizeof message, "berth: %s: %s\n", what, error == ENOENT ? "command not found" : strerror(error));
  send_frame('2', id, message, n < 0 ? 0 : (size_t)n >= sizeof message ? sizeof message - 1 : (size_t)n);
  send_number('x', id, error == ENOENT ? 127 : 126);
}

static void spawn_command(uint32_t id, const unsigned char *payload, size_t length) {
  // MODE, WORKDIR and at least one argument, each ending in NUL.
  char *fields[3 + 1024 + 1];
  size_t count = 0;
  for (size_t at = 0; at < length;) {
    const unsigned char *end = memchr(payload + at, 0, length - at);
    if (!end) serve_fail("a spawn frame whose last field is not ended");
    if (count == sizeof fields / sizeof fields[0] - 1) serve_fail("a spawn frame with too many arguments");
    fields[count++] = (char *)payload + at;
    at = (size_t)(end - payload) + 1;
  }
  if (count < 3) serve_fail("a spawn frame without a command");
  fields[count] = NULL;
  const char *mode = fields[0], *workdir = fields[1];
  char **argv = fields + 2;
  unsigned rows = 0, cols = 0;
  int tty = strncmp(mode, "tty:", 4) == 0, piped = strcmp(mode, "pipe") == 0;
  if (tty && (sscanf(mode + 4, "%u:%u", &rows, &cols) != 2 || rows < 1 || cols < 1 || rows > 65535 || cols > 65535))
    serve_fail("a spawn frame with a bad terminal size");
  if (!tty && !piped && strcmp(mode, "none") != 0) serve_fail("a spawn frame with an unknown mode");
  if (find_command(id)) serve_fail("a spawn frame for an id in use");
  if (command_count == COMMANDS_MAX) return refuse(id, argv[0], EAGAIN);
  struct command *c = calloc(1, sizeof *c);
  if (!c) return refuse(id, argv[0], ENOMEM);
  c->id = id;
  c->tty = c->in = c->out = c->err = -1;
  int input[2] = {-1, -1}, output[2] = {-1, -1}, errors[2] = {-1, -1}, null = -1;
  char *slave_name = NULL;
  int error = 0;
  if (tty) {
    c->tty = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (c->tty < 0 || grantpt(c->tty) < 0 || unlockpt(c->tty) < 0 || !(slave_name = ptsname(c->tty))) error = errno ? errno : EIO;
    else set_size(c->tty, rows, cols);
  } else if ((piped ? pipe2(input, O_CLOEXEC) : (null = open("/dev/null", O_RDONLY | O_CLOEXEC))) < 0 || pipe2(output, O_CLOEXEC) < 0 ||
             pipe2(errors, O_CLOEXEC) < 0) {
    error = errno;
  }
  pid_t parent = getpid();
  pid_t pid = error ? -1 : fork();
  if (pid == 0) {
    sigset_t empty;
    sigemptyset(&empty);
    sigprocmask(SIG_SETMASK, &empty, NULL);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    setrlimit(RLIMIT_NOFILE, &files_limit);
    setsid();
    // Should serve die (killed from inside the environment), so does the command.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(137);
    if (tty) {
      int slave = open(slave_name, O_RDWR);
      if (slave < 0) _exit(126);
      ioctl(slave, TIOCSCTTY, 0);
      dup2(slave, 0);
      dup2(slave, 1);
      dup2(slave, 2);
      if (slave > 2) close(slave);
      setenv("TERM", getenv("TERM") && *getenv("TERM") ? getenv("TERM") : "xterm-256color", 1);
    } else {
      dup2(piped ? input[0] : null, 0);
      dup2(output[1], 1);
      dup2(errors[1], 2);
    }
    const char *eol = tty ? "\r\n" : "\n";
    if (*workdir && chdir(workdir) < 0) {
      dprintf(2, "berth: cannot enter %s: %s%s", workdir, strerror(errno), eol);
      _exit(126);
    }
    execvp(argv[0], argv);
    int failed = errno;
    dprintf(2, "berth: %s: %s%s", argv[0], failed == ENOENT ? "command not found" : strerror(failed), eol);
    _exit(failed == ENOENT ? 127 : 126);
  }
  if (pid < 0 && !error) error = errno;
  close_fd(&input[0]);
  close_fd(&output[1]);
  close_fd(&errors[1]);
  close_fd(&null);
  if (error) {
    close_fd(&c->tty);
    close_fd(&input[1]);
    close_fd(&output[0]);
    close_fd(&errors[0]);
    free(c);
    return refuse(id, argv[0], error);
  }
  c->pid = pid;
  c->in = input[1];
  c->out = output[0];
  c->err = errors[0];
  int nonblocking[] = {c->tty, c->in, c->out, c->err};
  for (int i = 0; i < 4; i++)
    if (nonblocking[i] >= 0) fcntl(nonblocking[i], F_SETFL, fcntl(nonblocking[i], F_GETFL) | O_NONBLOCK);
  commands[command_count++] = c;
}

// Input held for the command, written as it takes it; each write is acknowledged to the node.
static void feed(struct command *c) {
  int sink = c->tty >= 0 ? c->tty : c->in;
  if (c->input_len > 0 && sink >= 0 && !c->exited) {
    ssize_t w = write(sink, c->input, c->input_len);
    if (w > 0) {
      memmove(c->input, c->input + w, c->input_len - (size_t)w);
      c->input_len -= (size_t)w;
      send_number('a', c->id, (uint32_t)w);
    } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
      close_fd(&c->in); // the command closed its input: what it did not take is dropped
    }
  }
  if ((sink < 0 || c->exited) && c->input_len > 0) {
    send_number('a', c->id, (uint32_t)c->input_len);
    c->input_len = 0;
  }
  if (c->eof_asked && !c->eof_done && c->input_len == 0) {
    c->eof_done = 1;
    if (c->tty >= 0) {
      // A terminal's end of input is its EOF character, at the start of a line.
      unsigned char eof = 4;
      if (write(c->tty, &eof, 1) < 0) {
      }
    } else {
      close_fd(&c->in);
    }
  }
}

// Reads what the command wrote, as far as its credit goes (all of it, unsent, once killed). Returns
// 1 when every output is at its end or has nothing more for now, 0 when credit ran out.
static int drain(struct command *c) {
  static unsigned char buffer[OUTPUT_CHUNK];
  int *fds[] = {c->tty >= 0 ? (c->tty_out_ended ? NULL : &c->tty) : &c->out, c->tty >= 0 ? NULL : &c->err};
  for (int i = 0; i < 2; i++) {
    int *fd = fds[i];
    while (fd && *fd >= 0) {
      if (!c->killed && c->credit <= 0) return 0;
      size_t want = c->killed || c->credit > OUTPUT_CHUNK ? OUTPUT_CHUNK : (size_t)c->credit;
      ssize_t n = read(*fd, buffer, want);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      if (n <= 0) {
        // Its end (or EIO: every holder of the terminal closed it). A terminal stays open for input.
        if (fd == &c->tty) c->tty_out_ended = 1;
        else close_fd(fd);
        break;
      }
      if (c->killed) continue;
      c->credit -= n;
      send_frame(i == 0 ? '1' : '2', c->id, buffer, (size_t)n);
      if (c->exited == 0) break; // one read per turn while it runs: other commands get theirs
    }
  }
  return 1;
}

static void finish(int index) {
  struct command *c = commands[index];
  send_number('x', c->id, (uint32_t)status_code(c->status));
  close_fd(&c->tty);
  close_fd(&c->in);
  close_fd(&c->out);
  close_fd(&c->err);
  free(c->input);
  free(c);
  commands[index] = commands[--command_count];
}

static void apply_frame(unsigned char type, const unsigned char *payload, size_t length) {
  if (length < 4) serve_fail("a frame without an id");
  uint32_t id = get32(payload);
  payload += 4;
  length -= 4;
  if (type == 's') return spawn_command(id, payload, length);
  if (!strchr("derkc", type) || type == 0) serve_fail("a frame of an unknown type");
  if ((type == 'r' || type == 'c') && length != 4) serve_fail("a malformed frame");
  // A command that ended may still be spoken to by a node that did not know yet.
  struct command *c = find_command(id);
  if (!c) return;
  if (type == 'd') {
    if (c->eof_asked) return;
    if (length > INPUT_MAX - c->input_len) serve_fail("input beyond the window");
    if (!c->input && !(c->input = malloc(INPUT_MAX))) serve_fail("no memory for input");
    memcpy(c->input + c->input_len, payload, length);
    c->input_len += length;
  } else if (type == 'e') {
    c->eof_asked = 1;
  } else if (type == 'r') {
    if (c->tty >= 0) set_size(c->tty, ((unsigned)payload[0] << 8) | payload[1], ((unsigned)payload[2] << 8) | payload[3]);
  } else if (type == 'k') {
    end_session(c);
    c->killed = 1;
  } else if (type == 'c') {
    c->credit += get32(payload);
    if (c->credit > CREDIT_MAX) c->credit = CREDIT_MAX;
  }
}

static int serve_main(void) {
  // Three descriptors a command: as many as the hard limit allows; commands get the usual limit back.
  getrlimit(RLIMIT_NOFILE, &files_limit);
  struct rlimit raised = {.rlim_cur = files_limit.rlim_max, .rlim_max = files_limit.rlim_max};
  setrlimit(RLIMIT_NOFILE, &raised);
  if (pipe2(child_pipe, O_CLOEXEC | O_NONBLOCK) < 0) return 126;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_child;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  fcntl(1, F_SETFL, fcntl(1, F_GETFL) & ~O_NONBLOCK);
  static unsigned char in[5 + SERVE_PAYLOAD_MAX];
  size_t have = 0;
  struct pollfd *fds = malloc(sizeof *fds * (2 + 3 * COMMANDS_MAX));
  if (!fds) return 126;
  for (;;) {
    int status;
    pid_t done;
    while ((done = waitpid(-1, &status, WNOHANG)) > 0) {
      for (int i = 0; i < command_count; i++) {
        struct command *c = commands[i];
        if (c->pid != done || c->exited) continue;
        c->exited = 1;
        c->status = status;
        // What is left of its session goes with it.
        kill(-c->pid, SIGKILL);
      }
    }
    for (int i = 0; i < command_count;) {
      struct command *c = commands[i];
      feed(c);
      if (drain(c) && c->exited) finish(i);
      else i++;
    }
    nfds_t n = 0;
    fds[n++] = (struct pollfd){.fd = 0, .events = POLLIN};
    fds[n++] = (struct pollfd){.fd = child_pipe[0], .events = POLLIN};
    for (int i = 0; i < command_count; i++) {
      struct command *c = commands[i];
      int reading = c->killed || c->credit > 0;
      if (c->tty >= 0) {
        short events = (reading && !c->tty_out_ended ? POLLIN : 0) | (c->input_len ? POLLOUT : 0);
        if (events) fds[n++] = (struct pollfd){.fd = c->tty, .events = events};
        continue;
      }
      if (c->in >= 0 && c->input_len) fds[n++] = (struct pollfd){.fd = c->in, .events = POLLOUT};
      int outputs[] = {c->out, c->err};
      for (int k = 0; k < 2; k++) {
        if (outputs[k] >= 0 && reading) fds[n++] = (struct pollfd){.fd = outputs[k], .events = POLLIN};
      }
    }
    if (poll(fds, n, -1) < 0 && errno != EINTR) serve_fail("poll failed");
    if (fds[1].revents) {
      unsigned char wake[256];
      while (read(child_pipe[0], wake, sizeof wake) > 0) {
      }
    }
    if (fds[0].revents) {
      ssize_t got = read(0, in + have, sizeof in - have);
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) {
        // The node went away: so does every command it started.
        kill_all();
        return 0;
      }
      have += (size_t)got;
      size_t at = 0;
      while (have - at >= 5) {
        uint32_t length = get32(in + at + 1);
        if (length > SERVE_PAYLOAD_MAX) serve_fail("a frame too long");
        if (have - at < 5 + length) break;
        apply_frame(in[at], in + at + 5, length);
        at += 5 + length;
      }
      memmove(in, in + at, have - at);
      have -= at;
    }
  }
}

// ---- dial, and the node's standing dialler

struct copy {
  int from, to;
  int shutdown_to;
  // `to` is the node's end: once it is gone, so is the whole connection (its process ends).
  int watch_reader;
};

static void *copy_bytes(void *arg) {
  struct copy *c = arg;
  static __thread char buffer[65536];
  for (;;) {
    if (c->watch_reader) {
      // An idle service sends nothing, so a write would never find out that the node went away
      // (killed: no EOF, no close): the reader gone (dial's output pipe, or a dialler's connection
      // the node closed) shows as POLLERR or POLLHUP, and the connection, and the process holding
      // the environment's network namespace, end.
      struct pollfd fds[2] = {{.fd = c->from, .events = POLLIN}, {.fd = c->to, .events = 0}};
      if (poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[1].revents & (POLLERR | POLLHUP | POLLNVAL)) _exit(0);
    }
    ssize_t n = read(c->from, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(c->to, buffer + off, (size_t)(n - off));
      if (w < 0 && errno == EINTR) continue;
      // The node's end gone: the connection ends now. The other way may never end by itself: it
      // can wait on a service that reads no more until its echo is taken, here.
      if (w <= 0 && c->watch_reader) _exit(0);
      if (w <= 0) return NULL;
      off += w;
    }
  }
  if (c->shutdown_to) shutdown(c->to, SHUT_WR);
  else close(c->to);
  return NULL;
}

// A TCP connection to port on this network namespace's loopback (127.0.0.1, else ::1), or -1 with
// errno as the first try left it.
static int connect_loopback(unsigned port) {
  struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  struct sockaddr_in6 v6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = IN6ADDR_LOOPBACK_INIT};
  int sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0 || connect(sock, (struct sockaddr *)&v4, sizeof v4) < 0) {
    int error = errno;
    if (sock >= 0) close(sock);
    sock = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock >= 0 && connect(sock, (struct sockaddr *)&v6, sizeof v6) < 0) {
      close(sock);
      sock = -1;
    }
    if (sock < 0) {
      errno = error;
      return -1;
    }
  }
  int one = 1;
  setsockopt(sock, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof one);
  return sock;
}

// A tunnel's bytes both ways, each in a thread of its own: what the node sends (`from_node`) into the
// service's socket, and what the service sends back to the node (`to_node`, watched: once the node's
// end is gone, the process ends). 1 when the second thread cannot start.
static int copy_both(int from_node, int to_node, int sock, int shutdown_node) {
  struct copy in = {.from = from_node, .to = sock, .shutdown_to = 1, .watch_reader = 0};
  struct copy out = {.from = sock, .to = to_node, .shutdown_to = shutdown_node, .watch_reader = 1};
  pthread_t thread;
  if (pthread_create(&thread, NULL, copy_bytes, &in) != 0) return 1;
  copy_bytes(&out);
  pthread_join(thread, NULL);
  return 0;
}

static int dial_main(const char *port_text) {
  char *end;
  long port = strtol(port_text, &end, 10);
  if (*end || port < 1 || port > 65535) {
    fprintf(stderr, "berth-envd: not a port: %s\n", port_text);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  int sock = connect_loopback((unsigned)port);
  if (sock < 0) {
    fprintf(stderr, "berth-envd: cannot reach port %ld in the environment: %s\n", port, strerror(errno));
    return 1;
  }
  return copy_both(0, 1, sock, 0);
}

// The node's standing dialler of one container (`dialer NAME PID`, src/node/netns-dial.ts): started
// by the node, as root in the host's namespaces, with the container's network namespace on
// descriptor 3, its mount namespace on 4, and PID its first process. It listens on the abstract
// Unix socket NAME, bound before it enters them: so in the host's network namespace, which nothing
// in a container reaches, and no file to leave behind however it ends. Then, in the container's
// namespaces as nobody, each connection of the node's own user (SO_PEERCRED: another user's is
// closed at once) is served by a child of its own, so a slow one holds up no other:
//   from the node: the port, 2 bytes big-endian;
//   to the node:   BERTH_DIALER_TOKEN (how the node knows its dialler from whatever took NAME after
//                  it ended), then 0 and the connection's bytes both ways, half-closes passed on;
//                  or 1 and why, to the end.
// It ends with PID (the container ended: it never holds the namespaces of one that is gone) and
// with the node (PR_SET_PDEATHSIG); a connection's child ends with its connection.
#define DIALER_TOKEN_LENGTH 32
#define DIALER_CONNECTIONS_MAX 4096
// Its exit when this machine refuses to enter a namespace or watch a process (a hardened kernel, a
// seccomp profile): the node dials through the engine from then on.
#define DIALER_CANNOT_ENTER 3
#define NOBODY 65534

static void on_dialer_child(int sig) {
  (void)sig; // wakes ppoll, which reaps
}

// The token, then status and why (if any). A new connection's buffer takes it whole, at once.
static int dialer_answer(int conn, const char *token, char status, const char *why) {
  char reply[DIALER_TOKEN_LENGTH + 1 + 256];
  memcpy(reply, token, DIALER_TOKEN_LENGTH);
  reply[DIALER_TOKEN_LENGTH] = status;
  size_t length = DIALER_TOKEN_LENGTH + 1;
  if (why) {
    size_t more = strnlen(why, sizeof reply - length);
    memcpy(reply + length, why, more);
    length += more;
  }
  return send(conn, reply, length, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)length ? 0 : -1;
}

static int dialer_connection(int conn, const char *token) {
  unsigned char port[2];
  for (size_t have = 0; have < sizeof port;) {
    ssize_t n = read(conn, port + have, sizeof port - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 1;
    have += (size_t)n;
  }
  unsigned number = (unsigned)port[0] << 8 | port[1];
  int sock = connect_loopback(number);
  if (sock < 0) {
    char why[200];
    snprintf(why, sizeof why, "cannot reach port %u in the environment: %s", number, strerror(errno));
    dialer_answer(conn, token, 1, why);
    return 1;
  }
  if (dialer_answer(conn, token, 0, NULL) < 0) return 1;
  return copy_both(conn, conn, sock, 1);
}

static int dialer_main(const char *name, const char *pid_text) {
  pid_t parent = getppid();
  // Who may use it: the node's own user, taken before it becomes nobody.
  uid_t node = geteuid();
  const char *token = getenv("BERTH_DIALER_TOKEN");
  char *end;
  long pid = strtol(pid_text, &end, 10);
  size_t length = strlen(name);
  struct sockaddr_un address = {.sun_family = AF_UNIX};
  if (*end || pid < 1 || length == 0 || length >= sizeof address.sun_path || !token || strlen(token) != DIALER_TOKEN_LENGTH) {
    fprintf(stderr, "berth-envd: dialer takes a name, a pid and BERTH_DIALER_TOKEN (%d characters)\n", DIALER_TOKEN_LENGTH);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  memcpy(address.sun_path + 1, name, length);
  int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (null < 0 || listener < 0 || bind(listener, (struct sockaddr *)&address, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + length)) < 0 ||
      listen(listener, SOMAXCONN) < 0) {
    perror("berth-envd: the dialler's socket");
    return 1;
  }
  int container = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
  if (container < 0) {
    int error = errno;
    perror("berth-envd: watching the container's first process");
    return error == ENOSYS ? DIALER_CANNOT_ENTER : 1;
  }
  if (setns(3, CLONE_NEWNET) < 0 || setns(4, CLONE_NEWNS) < 0) {
    perror("berth-envd: entering the container's namespaces");
    return DIALER_CANNOT_ENTER;
  }
  close(3);
  close(4);
  if (chdir("/") < 0 || setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0) {
    perror("berth-envd: becoming nobody");
    return 1;
  }
  // A change of user makes a process dumpable again where fs.suid_dumpable says so: then another
  // process of nobody's on the host could trace this one, inside the container's network.
  prctl(PR_SET_DUMPABLE, 0);
  // The change of user cleared it: from here on the dialler ends with the node, and if the node
  // ended meanwhile, now.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) return 1;
  fputs("ready\n", stderr);
  // The node's pipe is left to close: nothing more is said there, and no child holds it.
  dup2(null, 2);
  close(null);
  sigset_t blocked, empty;
  sigemptyset(&empty);
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGCHLD);
  sigprocmask(SIG_BLOCK, &blocked, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_dialer_child;
  sigaction(SIGCHLD, &sa, NULL);
  int live = 0;
  for (;;) {
    struct pollfd fds[2] = {{.fd = listener, .events = POLLIN}, {.fd = container, .events = POLLIN}};
    int ready = ppoll(fds, 2, NULL, &empty);
    int error = errno;
    while (waitpid(-1, NULL, WNOHANG) > 0) live--;
    if (ready < 0) {
      if (error == EINTR) continue;
      return 1;
    }
    if (fds[1].revents) return 0;
    if (!(fds[0].revents & POLLIN)) continue;
    int conn = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
    if (conn < 0) continue;
    struct ucred peer;
    socklen_t size = sizeof peer;
    if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &peer, &size) < 0 || peer.uid != node) {
      close(conn);
      continue;
    }
    if (live >= DIALER_CONNECTIONS_MAX) {
      dialer_answer(conn, token, 1, "too many connections into the environment at once");
      close(conn);
      continue;
    }
    pid_t child = fork();
    if (child == 0) {
      close(listener);
      close(container);
      sigprocmask(SIG_SETMASK, &empty, NULL);
      _exit(dialer_connection(conn, token));
    }
    if (child > 0) live++;
    close(conn);
  }
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

/*
 * Whether this process's network namespace has no link but loopback: a node asks it of its engine's
 * builds (a build step that is not isolated from the host's network must not run a tenant's code).
 * Exit 0: only loopback; 3: other links (named on stdout); 1: cannot tell.
 */
static int netcheck_main(void) {
  struct if_nameindex *links = if_nameindex();
  if (!links) {
    perror("berth-envd: links");
    return 1;
  }
  int others = 0;
  for (struct if_nameindex *link = links; link->if_index != 0; link++) {
    if (strcmp(link->if_name, "lo") == 0) continue;
    printf("%s\n", link->if_name);
    others++;
  }
  if_freenameindex(links);
  return others ? 3 : 0;
}

int main(int argc, char **argv) {
  // Nothing of the environment opens this process in /proc (a command's child gets it back at exec).
  prctl(PR_SET_DUMPABLE, 0);
  if (argc >= 2 && strcmp(argv[1], "init") == 0) return init_main(argc - 2, argv + 2);
  if (argc == 2 && strcmp(argv[1], "serve") == 0) return serve_main();
  if (argc == 3 && strcmp(argv[1], "dial") == 0) return dial_main(argv[2]);
  if (argc == 4 && strcmp(argv[1], "dialer") == 0) return dialer_main(argv[2], argv[3]);
  if (argc == 2 && strcmp(argv[1], "id") == 0) {
    printf("%u:%u\n", (unsigned)getuid(), (unsigned)getgid());
    return 0;
  }
  if (argc >= 2 && strcmp(argv[1], "guard") == 0) return guard_main(argc - 2, argv + 2);
  if (argc == 2 && strcmp(argv[1], "netcheck") == 0) return netcheck_main();
  fprintf(stderr, "usage: berth-envd init [cmd...] | serve | dial PORT | dialer NAME PID | id | guard PREFIX... | netcheck\n");
  return 2;
}
