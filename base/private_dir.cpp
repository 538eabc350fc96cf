#include "base/private_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"

namespace fl {

namespace fs = std::filesystem;

namespace {

// What is wrong with one directory (or a symlink on the way), or nothing.
std::optional<std::string> judge(const struct stat& st) {
  const uid_t me = ::geteuid();
  if (st.st_uid != 0 && st.st_uid != me) return std::string("owned by another user");
  // A symlink's own mode is always 0777 and means nothing; its owner is what matters.
  if (S_ISLNK(st.st_mode)) return std::nullopt;
  const bool grp = (st.st_mode & S_IWGRP) != 0, oth = (st.st_mode & S_IWOTH) != 0;
  if ((grp || oth) && (st.st_mode & S_ISVTX) == 0) {
    return fmt::format("writable by {} without the sticky bit", grp && oth ? "its group and others"
                                                                : grp      ? "its group"
                                                                           : "others");
  }
  return std::nullopt;
}

std::string refusal(const std::string& what, const std::string& path, const std::string& dir,
                    const struct stat& st, const std::string& problem) {
  return fmt::format(
      "{} {}: {}{} (owner uid {}, mode {:04o}) is {}; allowed: directories owned by root or by uid "
      "{} that no other user can write, or sticky ones like /tmp (another user could swap the run "
      "directory for their own); use a directory of your own, or --allow-shared-results to accept "
      "it",
      what, path, S_ISLNK(st.st_mode) ? "the symlink " : "", dir, st.st_uid, st.st_mode & 07777,
      problem, ::geteuid());
}

// Every prefix of an absolute, normal path: "/", "/a", "/a/b".
std::vector<std::string> prefixes(const fs::path& p) {
  std::vector<std::string> out;
  fs::path cur;
  for (const auto& part : p) {
    cur /= part;
    out.push_back(cur.string());
  }
  return out;
}

std::string sys_error(const std::string& what, const std::string& path, const std::string& p) {
  return fmt::format("{} {}: {}: {}", what, path, p, std::strerror(errno));
}

// The first problem on `dirs` ("" when none); `follow` uses stat instead of lstat.
std::string first_problem(const std::vector<std::string>& dirs, const std::string& what,
                          const std::string& path, bool follow) {
  for (const auto& d : dirs) {
    struct stat st {};
    if ((follow ? ::stat(d.c_str(), &st) : ::lstat(d.c_str(), &st)) != 0) {
      raise<ConfigError>("{}", sys_error(what, path, d));
    }
    if (!S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode)) {
      raise<ConfigError>("{} {}: {} is not a directory", what, path, d);
    }
    if (auto why = judge(st)) return refusal(what, path, d, st, *why);
  }
  return "";
}

std::string random_suffix() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t seed = std::random_device{}();
  return fmt::format("{}-{:x}-{}", ::getpid(), seed, counter.fetch_add(1));
}

void check_component(const std::string& part, const std::string& rel) {
  if (part.empty() || part == "." || part == "..") {
    raise<Error>("'{}': not a plain relative path", rel);
  }
}

std::vector<std::string> components(const std::string& rel) {
  std::vector<std::string> out;
  if (!rel.empty() && rel[0] == '/') raise<Error>("'{}': not a relative path", rel);
  size_t start = 0;
  while (start <= rel.size()) {
    const size_t slash = rel.find('/', start);
    const std::string part =
        rel.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    check_component(part, rel);
    out.push_back(part);
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return out;
}

bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string check_private_dir(const std::string& path, const std::string& what, bool allow_shared,
                              bool ancestors) {
  const fs::path abs = fs::absolute(path).lexically_normal();
  std::vector<std::string> lexical = prefixes(abs);
  if (!lexical.empty() && lexical.back().size() > 1 && lexical.back().back() == '/') {
    lexical.pop_back();  // "/a/b/" normalises to a trailing empty part
  }
  if (!ancestors) lexical = {lexical.back()};
  // Symlinks on the way: their owners (who can point them elsewhere); then where they lead.
  std::string why = first_problem(lexical, what, path, false);
  if (why.empty()) {
    std::error_code ec;
    const fs::path real = fs::canonical(abs, ec);
    if (ec) raise<ConfigError>("{} {}: {}", what, path, ec.message());
    std::vector<std::string> resolved = prefixes(real);
    if (!ancestors) resolved = {resolved.back()};
    why = first_problem(resolved, what, path, true);
  }
  if (!why.empty() && !allow_shared) throw ConfigError(why);
  return why;
}

std::string make_private_dir(const std::string& path, const std::string& what, bool allow_shared) {
  const fs::path abs = fs::absolute(path).lexically_normal();
  for (const auto& p : prefixes(abs)) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) == 0) continue;
    if (errno != ENOENT || (::mkdir(p.c_str(), 0755) != 0 && errno != EEXIST)) {
      raise<ConfigError>("{} {}: cannot create {}: {}", what, path, p, std::strerror(errno));
    }
  }
  return check_private_dir(path, what, allow_shared);
}

std::string private_temp_dir(const std::string& name, const std::string& setting) {
  std::error_code ec;
  const fs::path base = fs::temp_directory_path(ec);
  const std::string dir =
      ((ec ? fs::path("/tmp") : base) / fmt::format("{}-{}", name, ::geteuid())).string();
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    raise<Error>("{}: cannot create: {} (set {} to a directory of your own)", dir,
                 std::strerror(errno), setting);
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) raise<Error>("{}: {}", dir, std::strerror(errno));
  std::string wrong;
  if (S_ISLNK(st.st_mode)) {
    wrong = "a symlink";
  } else if (!S_ISDIR(st.st_mode)) {
    wrong = "not a directory";
  } else if (st.st_uid != ::geteuid()) {
    wrong = fmt::format("owned by uid {}", st.st_uid);
  } else if ((st.st_mode & 077) != 0) {
    wrong = fmt::format("mode {:04o}", st.st_mode & 07777);
  }
  if (!wrong.empty()) {
    raise<Error>(
        "{}: refused: it is {}, and must be a directory of uid {} that only it can enter (another "
        "user may have made it to plant files this user would load); remove it, or set {} to a "
        "directory of your own",
        dir, wrong, ::geteuid(), setting);
  }
  check_private_dir(dir, setting, false);
  return dir;
}

ShortLinkDir::ShortLinkDir(const std::string& prefix, const std::string& link,
                           const std::string& target)
    : link_(link) {
  std::string tmpl = "/tmp/" + prefix + "XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    raise<Error>("cannot make a private directory {} for a short socket path: {}", tmpl,
                 std::strerror(errno));
  }
  dir_ = tmpl;
  const std::string to = fs::absolute(target).lexically_normal().string();
  if (::symlink(to.c_str(), path().c_str()) != 0) {
    const int err = errno;
    ::rmdir(dir_.c_str());
    dir_.clear();
    raise<Error>("cannot link {} to {}: {}", tmpl + "/" + link, to, std::strerror(err));
  }
}

ShortLinkDir::ShortLinkDir(ShortLinkDir&& o) noexcept
    : dir_(std::exchange(o.dir_, {})), link_(std::move(o.link_)) {}

ShortLinkDir& ShortLinkDir::operator=(ShortLinkDir&& o) noexcept {
  if (this != &o) {
    remove();
    dir_ = std::exchange(o.dir_, {});
    link_ = std::move(o.link_);
  }
  return *this;
}

ShortLinkDir::~ShortLinkDir() {
  remove();
}

void ShortLinkDir::remove() {
  if (dir_.empty()) return;
  ::unlink(path().c_str());  // the link only: unlink never follows it
  ::rmdir(dir_.c_str());
  dir_.clear();
}

std::string private_cache_dir(const std::string& configured, const std::string& name,
                              const std::string& setting) {
  if (configured.empty()) return private_temp_dir(name, setting);
  const fs::path p = fs::absolute(configured).lexically_normal();
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  if (::mkdir(p.c_str(), 0700) != 0 && errno != EEXIST) {
    raise<Error>("{} {}: cannot create: {}", setting, configured, std::strerror(errno));
  }
  check_private_dir(configured, setting, false, false);
  return configured;
}

DirFd DirFd::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) raise<Error>("{}: cannot open the directory: {}", path, std::strerror(errno));
  return DirFd(fd, path);
}

DirFd DirFd::open_at(int parent, const std::string& name, const std::string& path) {
  const int fd = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    struct stat st {};  // O_DIRECTORY answers ENOTDIR for a symlink: say what it is
    const bool link =
        ::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
    raise<Error>("{}: cannot open the directory: {}", path,
                 link ? "it is a symlink (not followed)" : std::strerror(err));
  }
  return DirFd(fd, path);
}

DirFd::DirFd(DirFd&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) {
  o.fd_ = -1;
}

DirFd& DirFd::operator=(DirFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

DirFd::~DirFd() {
  if (fd_ >= 0) ::close(fd_);
}

void DirFd::mkdirs(const std::string& rel, mode_t mode) const {
  int cur = fd_;
  DirFd held;
  std::string path = path_;
  for (const auto& part : components(rel)) {
    path += "/" + part;
    if (::mkdirat(cur, part.c_str(), mode) != 0 && errno != EEXIST) {
      raise<Error>("{}: cannot create the directory: {}", path, std::strerror(errno));
    }
    held = open_at(cur, part, path);
    cur = held.fd_;
  }
}

DirFd DirFd::sub(const std::string& rel) const {
  DirFd held;
  int cur = fd_;
  std::string path = path_;
  for (const auto& part : components(rel)) {
    path += "/" + part;
    held = open_at(cur, part, path);
    cur = held.fd_;
  }
  return held;
}

std::pair<DirFd, std::string> DirFd::parent_of(const std::string& rel) const {
  const auto slash = rel.rfind('/');
  const std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
  check_component(name, rel);
  DirFd dir = slash == std::string::npos ? open_at(fd_, ".", path_) : sub(rel.substr(0, slash));
  return {std::move(dir), name};
}

int DirFd::open_file(const std::string& rel, int flags, mode_t mode) const {
  auto [dir, name] = parent_of(rel);
  const int fd = ::openat(dir.fd_, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) {
    raise<Error>("{}/{}: cannot open: {}", path_, rel,
                 errno == ELOOP ? "it is a symlink (not followed)" : std::strerror(errno));
  }
  return fd;
}

void DirFd::write_atomic(const std::string& rel, const std::string& text, mode_t mode) const {
  auto [dir, name] = parent_of(rel);
  std::string tmp;
  int fd = -1;
  // A unique name created exclusively: a file or symlink someone put at a name we would use is
  // never opened, only skipped.
  for (int tries = 0; fd < 0; ++tries) {
    tmp = "." + name + ".tmp-" + random_suffix();
    fd = ::openat(dir.fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && (errno != EEXIST || tries >= 16)) {
      raise<Error>("{}/{}: cannot create a temporary file: {}", path_, rel, std::strerror(errno));
    }
  }
  const bool ok = write_all(fd, text) && (mode == 0 || ::fchmod(fd, mode) == 0);
  const int err = errno;
  ::close(fd);
  if (!ok || ::renameat(dir.fd_, tmp.c_str(), dir.fd_, name.c_str()) != 0) {
    const int e = ok ? errno : err;
    ::unlinkat(dir.fd_, tmp.c_str(), 0);
    raise<Error>("{}/{}: cannot write: {}", path_, rel, std::strerror(e));
  }
}

void DirFd::write_new(const std::string& rel, const std::string& text, mode_t mode) const {
  const int fd = open_file(rel, O_WRONLY | O_CREAT | O_EXCL, mode);
  const bool ok = ::fchmod(fd, mode) == 0 && write_all(fd, text);  // whatever the umask was
  const int err = errno;
  ::close(fd);
  if (!ok) raise<Error>("{}/{}: cannot write: {}", path_, rel, std::strerror(err));
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const fs::path p(path);
  const std::string name = p.filename().string();
  if (name.empty() || name == "." || name == "..") raise<Error>("{}: not a file name", path);
  const fs::path parent = p.parent_path();
  DirFd::open(parent.empty() ? "." : parent.string()).write_atomic(name, text);
}

}  // namespace fl
