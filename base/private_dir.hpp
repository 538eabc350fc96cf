// Directories another local user cannot steer. A results directory that someone else can write
// lets them swap a run directory for their own between mkdir and the first write, plant a symlink
// where a temporary file will be created, read the ground truth and forge the verdict (issue 32).
// So: a results, suite or run directory is accepted only when it and every directory above it is
// owned by root or by this user and is writable by nobody else (a sticky directory such as /tmp is
// fine: others cannot rename or remove what we create in it); the files of a run are written
// through one descriptor of the directory opened once (DirFd), never by path; and caches that used
// to live at fixed names in the system temp directory live in a per-user 0700 directory.
#pragma once

#include <sys/types.h>

#include <string>

namespace fl {

// Checks `path` and every directory above it (symlinks on the way included, then the resolved
// path): each must be owned by root or by the effective user, and not writable by its group or by
// others unless it has the sticky bit. Returns "" when all are. Otherwise throws ConfigError
// naming `what` (e.g. "--results"), the path, the offending directory with its owner and mode, and
// what is allowed; with `allow_shared` it returns that text (for a warning) instead. With
// `ancestors` false only `path` itself is checked. `path` must exist.
std::string check_private_dir(const std::string& path, const std::string& what, bool allow_shared,
                              bool ancestors = true);

// Creates the directories of `path` that are missing with mode 0755 (not 0777 less a umask that may
// leave them group-writable), then check_private_dir. Returns its result.
std::string make_private_dir(const std::string& path, const std::string& what, bool allow_shared);

// A per-user private directory in the system temp directory ($TMPDIR, else /tmp):
// TMP/<name>-<euid>, created 0700 when missing. Throws Error when it exists but is not a directory
// owned by this user that only this user can enter (another user made it first, or it is a
// symlink), or when check_private_dir refuses it. `setting` names what overrides it in the error.
std::string private_temp_dir(const std::string& name, const std::string& setting);

// A cache or build directory whose files this user's processes load: `configured` when set (the
// setting's value; created 0700 when missing, and refused unless that directory itself is owned by
// root or this user and writable by no one else), else private_temp_dir(name, setting).
std::string private_cache_dir(const std::string& configured, const std::string& name,
                              const std::string& setting);

// The longest path a unix socket's address holds (sockaddr_un's 108 bytes less the final NUL).
inline constexpr size_t kUnixSocketPathMax = 107;

// A short way to a directory whose own path is too long for a unix socket in it: a new directory
// /tmp/<prefix>XXXXXX (mkdtemp: mode 0700, this user's) holding one symlink, `link`, to `target`.
// A socket bound at path()/NAME is created in `target` (the kernel follows the link), and a client
// connects through the same short path. Unlike loopback TCP, no other user can reach it, and ranks
// in their own network namespaces still can (they share the filesystem). The destructor removes
// the link and the directory, never the target. Throws Error when the directory cannot be made.
class ShortLinkDir {
 public:
  ShortLinkDir() = default;
  ShortLinkDir(const std::string& prefix, const std::string& link, const std::string& target);
  ShortLinkDir(ShortLinkDir&& o) noexcept;
  ShortLinkDir& operator=(ShortLinkDir&& o) noexcept;
  ShortLinkDir(const ShortLinkDir&) = delete;
  ShortLinkDir& operator=(const ShortLinkDir&) = delete;
  ~ShortLinkDir();

  // /tmp/<prefix>XXXXXX/<link>: `target` by a short path ("" when none was made).
  std::string path() const { return dir_.empty() ? "" : dir_ + "/" + link_; }
  const std::string& dir() const { return dir_; }

 private:
  void remove();
  std::string dir_, link_;
};

// A directory opened once (O_DIRECTORY|O_CLOEXEC); files are created and replaced relative to the
// descriptor, with O_NOFOLLOW on every component below it. Renaming the directory, or putting
// another one at its path, changes nothing for what is written through it.
class DirFd {
 public:
  DirFd() = default;
  // Opens `path` (symlinks in it are followed; check it with check_private_dir first).
  static DirFd open(const std::string& path);
  // Opens `name` in `parent` with O_NOFOLLOW (a symlink there is refused). `path` is what error
  // messages call it.
  static DirFd open_at(int parent, const std::string& name, const std::string& path);
  DirFd(DirFd&& o) noexcept;
  DirFd& operator=(DirFd&& o) noexcept;
  DirFd(const DirFd&) = delete;
  DirFd& operator=(const DirFd&) = delete;
  ~DirFd();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  explicit operator bool() const { return fd_ >= 0; }

  // Creates the directories of `rel` ("ranks/rank0") below this one that are missing, mode `mode`
  // (less the umask); a symlink on the way is refused.
  void mkdirs(const std::string& rel, mode_t mode = 0755) const;
  // Opens the directory `rel` below this one, no symlink followed.
  DirFd sub(const std::string& rel) const;
  // Opens the file `rel` with `flags` | O_NOFOLLOW | O_CLOEXEC (and `mode` when creating); returns
  // the descriptor or throws Error.
  int open_file(const std::string& rel, int flags, mode_t mode = 0644) const;
  // Replaces `rel` with `text` atomically: a new temporary of a unique name in the same directory
  // (O_CREAT|O_EXCL|O_NOFOLLOW), written, then renamed over `rel`; the temporary is removed on
  // error. `mode` is applied with fchmod (0: keep 0644 less the umask).
  void write_atomic(const std::string& rel, const std::string& text, mode_t mode = 0) const;
  // Creates `rel` exclusively (it must not exist) with `text` and exactly `mode`.
  void write_new(const std::string& rel, const std::string& text, mode_t mode) const;

 private:
  DirFd(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  // The directory holding `rel`'s last component, and that component.
  std::pair<DirFd, std::string> parent_of(const std::string& rel) const;
  int fd_ = -1;
  std::string path_;
};

// Writes `text` to `path` atomically as DirFd::write_atomic does, in `path`'s directory.
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace fl
