#include "base/mapped_file.h"

#include "base/huge_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace m2 {

namespace {

// An open descriptor of a regular file and its size, or an error naming the file.
struct OpenedFile {
  int fd;
  size_t size;
};
Result<OpenedFile> OpenRegularFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error("cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return Error("cannot stat '{}': {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error("'{}' is not a regular file", path);
  }
  return OpenedFile{fd, static_cast<size_t>(st.st_size)};
}

}  // namespace

Result<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  M2_ASSIGN_OR_RETURN(const OpenedFile of, OpenRegularFile(path));
  const int fd = of.fd;
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = of.size;
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      return Error("cannot map '{}' ({} bytes): {}", path, f->size_, std::strerror(e));
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
  return f;
}

Result<std::unique_ptr<MappedFile>> MappedFile::Read(const std::string& path,
                                                     const std::function<void(uint64_t)>& on_bytes) {
  M2_ASSIGN_OR_RETURN(const OpenedFile of, OpenRegularFile(path));
  const int fd = of.fd;
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = of.size;
  if (f->size_ > 0) {
    f->copy_ = std::make_unique<HugePageBuffer>(f->size_);
    uint8_t* dst = f->copy_->data();
    constexpr size_t kChunk = size_t{64} << 20;
    for (size_t done = 0; done < f->size_;) {
      const ssize_t got = ::pread(fd, dst + done, std::min(kChunk, f->size_ - done), static_cast<off_t>(done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        const int e = errno;
        ::close(fd);
        return Error("reading '{}': {} at byte {} of {}", path, got == 0 ? "the file ended" : std::strerror(e), done,
                     f->size_);
      }
      done += static_cast<size_t>(got);
      if (on_bytes) on_bytes(static_cast<uint64_t>(got));
    }
    f->data_ = dst;
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr && copy_ == nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error("cannot open '{}': {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Error("error while reading '{}'", path);
  return ss.str();
}

}  // namespace m2
