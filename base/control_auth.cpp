#include "base/control_auth.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "base/error.hpp"

namespace fl {

std::string make_control_secret() {
  unsigned char buf[32];
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) raise<Error>("control secret: cannot open /dev/urandom: {}", std::strerror(errno));
  size_t got = 0;
  while (got < sizeof(buf)) {
    const ssize_t n = ::read(fd, buf + got, sizeof(buf) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      raise<Error>("control secret: short read from /dev/urandom");
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  std::string hex;
  for (unsigned char c : buf) hex += fmt::format("{:02x}", c);
  return hex;
}

bool secrets_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  volatile unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = static_cast<unsigned char>(
        diff | (static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i])));
  }
  return diff == 0;
}

void write_secret_file(const std::string& path, const std::string& secret) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) raise<Error>("{}: cannot create the control secret: {}", path, std::strerror(errno));
  // A filesystem that maps this user to another (NFS root_squash) gives the file to that user,
  // whose processes on every node could then read it: refuse rather than run with it.
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_uid != ::geteuid()) {
    const unsigned owner = static_cast<unsigned>(st.st_uid);
    ::close(fd);
    ::unlink(path.c_str());
    raise<Error>(
        "{}: the control secret would belong to uid {}, not to this user (uid {}); that user "
        "could read it (a filesystem that maps this user to another, e.g. NFS root_squash): use a "
        "--results directory on a filesystem that keeps this user's ownership",
        path, owner, ::geteuid());
  }
  const std::string text = secret + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::fchmod(fd, 0600);  // whatever the umask was
  ::close(fd);
  if (!ok) raise<Error>("{}: cannot write the control secret", path);
}

std::string control_secret_for(const std::string& addr) {
  if (const char* s = std::getenv(kControlSecretEnv); s != nullptr && *s != '\0') return s;
  if (addr.rfind("unix:", 0) != 0) return "";
  std::string path = addr.substr(5);
  const auto slash = path.rfind('/');
  path = (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/" +
         kControlSecretFile;
  std::ifstream in(path);
  std::string secret;
  in >> secret;
  return secret;
}

}  // namespace fl
