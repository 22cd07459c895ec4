#include "cli/shell_tools.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace m2::runtime {

using chat::Json;

namespace {

// A tool's output becomes part of the prompt; far more than any context holds is a
// runaway command, not a result.
constexpr size_t kMaxOutputBytes = 4 << 20;

std::string Describe(const Json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

}  // namespace

Result<ShellTools> ShellTools::FromJson(const Json& list, const std::string& what) {
  if (!list.is_array()) return Error("{}: expected a JSON array of tools, found {}", what, chat::JsonTypeName(list));
  ShellTools t;
  for (size_t i = 0; i < list.size(); ++i) {
    Json tool = list[i];
    const std::string where = fmt::format("{}: tools[{}]", what, i);
    if (!tool.is_object()) return Error("{}: expected an object, found {}", where, chat::JsonTypeName(tool));
    if (!tool.contains("function") || !tool["function"].is_object())
      return Error("{}: expected {{\"type\": \"function\", \"function\": {{\"name\": ...}}, \"command\": ...}}, "
                   "found {}", where, Describe(tool));
    // "command" beside "function", or inside it; never shown to the model. (Taken out
    // before anything holds an iterator: ordered_json erases by shifting.)
    Json command;
    if (tool.contains("command")) {
      command = tool["command"];
      tool.erase("command");
    } else if (tool["function"].contains("command")) {
      command = tool["function"]["command"];
      tool["function"].erase("command");
    }
    const Json& fn = tool["function"];
    const Json* name = fn.contains("name") ? &fn["name"] : nullptr;
    if (name == nullptr || !name->is_string() || name->get<std::string>().empty())
      return Error("{}.function.name: expected a non-empty string, found {}", where,
                   name == nullptr ? "nothing" : Describe(*name));
    if (!command.is_string() || command.get<std::string>().empty())
      return Error("{} ('{}'): expected a \"command\" string (a shell command that reads the arguments as JSON "
                   "on standard input), found {}", where, name->get<std::string>(),
                   command.is_null() ? "nothing" : Describe(command));
    if (!t.commands_.emplace(name->get<std::string>(), command.get<std::string>()).second)
      return Error("{}: a second tool named '{}'", where, name->get<std::string>());
    t.tools_.push_back(std::move(tool));
  }
  return t;
}

Result<std::string> ShellTools::Run(const chat::ToolCall& call, double timeout_seconds,
                                    const std::atomic<bool>* cancel) const {
  auto it = commands_.find(call.name);
  if (it == commands_.end()) return Error("there is no tool named '{}'", call.name);
  auto out = RunShellCommand(it->second, call.arguments.dump(), timeout_seconds, cancel);
  if (!out.ok()) return Status(out.status()).WithContext(fmt::format("tool '{}'", call.name));
  return out;
}

Result<std::string> RunShellCommand(const std::string& command, const std::string& input, double timeout_seconds,
                                    const std::atomic<bool>* cancel) {
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) return Error("cannot create a pipe: {}", std::strerror(errno));
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    close(in_pipe[0]);
    close(in_pipe[1]);
    return Error("cannot create a pipe: {}", std::strerror(errno));
  }
  // A command that exits without reading its input makes our write fail with SIGPIPE,
  // which would kill the program. Block it on this thread and take back any that arrives.
  sigset_t pipe_set, old_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);

  const pid_t pid = fork();
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    // Its own process group, so that a timeout or Ctrl-C ends everything the command
    // started (sh may fork rather than exec), not just the shell.
    setpgid(0, 0);
    dup2(in_pipe[0], STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, nullptr);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  if (pid > 0) setpgid(pid, pid);  // also here: no race with the kill below
  close(in_pipe[0]);
  close(out_pipe[1]);
  auto restore = [&] {
    struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  };
  if (pid < 0) {
    const int err = errno;
    close(in_pipe[1]);
    close(out_pipe[0]);
    restore();
    return Error("cannot start '{}': {}", command, std::strerror(err));
  }

  int wfd = in_pipe[1];
  const int rfd = out_pipe[0];
  fcntl(wfd, F_SETFL, O_NONBLOCK);
  size_t written = 0;
  if (input.empty()) {
    close(wfd);
    wfd = -1;
  }
  std::string output;
  bool timed_out = false, too_big = false, cancelled = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  char buf[65536];
  while (true) {
    pollfd fds[2];
    int n = 0;
    fds[n++] = {rfd, POLLIN, 0};
    if (wfd >= 0) fds[n++] = {wfd, POLLOUT, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    if (cancel != nullptr && cancel->load()) {
      cancelled = true;
      break;
    }
    // Wake up at least every 100 ms to look at the cancel flag.
    const int ready = poll(fds, n, static_cast<int>(std::min<int64_t>(left.count(), 100)));
    if (ready < 0) {
      if (errno == EINTR) continue;  // e.g. Ctrl-C: the flag is checked at the top
      break;
    }
    if (wfd >= 0 && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t w = write(wfd, input.data() + written, input.size() - written);
      if (w > 0) written += static_cast<size_t>(w);
      if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == input.size()) {
        close(wfd);  // done, or the command stopped reading: either way it has its input
        wfd = -1;
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t r = read(rfd, buf, sizeof(buf));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;  // end of output
      output.append(buf, static_cast<size_t>(r));
      if (output.size() > kMaxOutputBytes) {
        too_big = true;
        break;
      }
    }
  }
  if (wfd >= 0) close(wfd);
  close(rfd);
  if (timed_out || too_big || cancelled) kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  restore();
  if (cancelled) return Error("'{}' was stopped (interrupted)", command);
  if (timed_out) return Error("'{}' ran past the time limit of {} s and was stopped", command, timeout_seconds);
  if (too_big) return Error("'{}' wrote more than {} bytes", command, kMaxOutputBytes);
  if (WIFSIGNALED(status))
    return Error("'{}' was ended by signal {}; its output: {}", command, WTERMSIG(status), output);
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    if (WEXITSTATUS(status) == 127 && output.empty())
      return Error("'{}' exited with status 127 (command not found?)", command);
    return Error("'{}' exited with status {}; its output: {}", command, WEXITSTATUS(status), output);
  }
  return output;
}

}  // namespace m2::runtime
