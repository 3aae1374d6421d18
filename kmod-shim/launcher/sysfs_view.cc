#include "kmod-shim/launcher/sysfs_view.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace metaroce::launcher {
namespace {

const char* const kPublishedClasses[] = {"infiniband", "infiniband_verbs"};

std::string errno_text(const std::string& what, int err) { return what + ": " + std::strerror(err); }

bool write_proc(const std::string& path, const std::string& text, std::string* why) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = errno_text("open " + path, errno);
    return false;
  }
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  int err = errno;
  close(fd);
  if (!ok) *why = errno_text("write " + path, err);
  return ok;
}

// A user namespace in which the caller is itself (uid and gid map to
// themselves) and holds CAP_SYS_ADMIN over a new mount namespace.
bool enter_user_namespace(std::string* how, std::string* why, bool* fallback_safe) {
  uid_t uid = geteuid();
  gid_t gid = getegid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
    int err = errno;
    *why = errno_text("no CAP_SYS_ADMIN, and unshare(CLONE_NEWUSER)", err) +
           (err == EPERM || err == ENOSPC || err == EUSERS
                ? " (unprivileged user namespaces are disabled here: kernel.unprivileged_userns_clone,"
                  " user.max_user_namespaces, or a seccomp/AppArmor policy); run as root or enable them"
                : "");
    return false;
  }
  if (!write_proc("/proc/self/setgroups", "deny", why) ||
      !write_proc("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1\n", why) ||
      !write_proc("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1\n", why)) {
    *fallback_safe = false;  // inside a user namespace that maps nobody
    return false;
  }
  *how = "user + mount namespace (uid " + std::to_string(uid) + ")";
  return true;
}

bool enter_mount_namespace(std::string* how, std::string* why, bool* fallback_safe) {
  if (unshare(CLONE_NEWNS) == 0) {
    *how = "mount namespace";
  } else if (errno != EPERM) {
    *why = errno_text("unshare(CLONE_NEWNS)", errno);
    return false;
  } else if (!enter_user_namespace(how, why, fallback_safe)) {
    return false;
  }
  // Slave: host mounts still arrive, ours never leave.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) {
    *why = errno_text("making / a slave mount", errno);
    return false;
  }
  return true;
}

// The flags a remount must keep: in a user namespace the kernel refuses to
// clear nosuid/nodev/noexec/atime flags that the host set.
unsigned long locked_flags(const std::string& path) {
  struct statvfs st {};
  if (statvfs(path.c_str(), &st) != 0) return 0;
  unsigned long f = 0;
  if (st.f_flag & ST_NOSUID) f |= MS_NOSUID;
  if (st.f_flag & ST_NODEV) f |= MS_NODEV;
  if (st.f_flag & ST_NOEXEC) f |= MS_NOEXEC;
  if (st.f_flag & ST_NOATIME) f |= MS_NOATIME;
  if (st.f_flag & ST_NODIRATIME) f |= MS_NODIRATIME;
  if (st.f_flag & ST_RELATIME) f |= MS_RELATIME;
  return f;
}

bool bind(const std::string& source, const std::string& target, bool read_only, std::string* why) {
  if (mkdir(target.c_str(), 0755) != 0 && errno != EEXIST) {
    *why = errno_text("mkdir " + target, errno);
    return false;
  }
  if (mount(source.c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    *why = errno_text("bind " + source + " on " + target, errno);
    return false;
  }
  if (read_only && mount(nullptr, target.c_str(), nullptr,
                         MS_REMOUNT | MS_BIND | MS_RDONLY | locked_flags(target), nullptr) != 0) {
    *why = errno_text("read-only remount of " + target, errno);
    return false;
  }
  return true;
}

bool is_published_class(const std::string& name) {
  for (const char* c : kPublishedClasses)
    if (name == c) return true;
  return false;
}

// Every class the host has, by name (read before the tmpfs hides them).
bool host_classes(int class_fd, std::vector<std::string>* names, std::string* why) {
  int fd = openat(class_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = fd < 0 ? nullptr : fdopendir(fd);
  if (!d) {
    *why = errno_text("reading the host's /sys/class", errno);
    if (fd >= 0) close(fd);
    return false;
  }
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names->push_back(n);
  }
  closedir(d);
  return true;
}

// The tmpfs over sys_class with the host's classes and the published ones.
bool build(const ViewOptions& o, int class_fd, const std::vector<std::string>& names, std::string* why) {
  if (mount("metaroce-sysfs-view", o.sys_class.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
            "mode=0755,size=64k") != 0) {
    *why = errno_text("mounting a tmpfs on " + o.sys_class, errno);
    return false;
  }
  const std::string host = "/proc/self/fd/" + std::to_string(class_fd) + "/";
  for (const std::string& n : names) {
    if (is_published_class(n)) {
      *why = "the host already has " + o.sys_class + "/" + n +
             " (kernel RDMA): it is kept, and metaroce devices are visible only through SYSFS_PATH";
      return false;
    }
    if (!bind(host + n, o.sys_class + "/" + n, false, why)) return false;
  }
  for (const char* c : kPublishedClasses) {
    std::string src = o.published_root + "/class/" + c;
    struct stat st {};
    if (stat(src.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      *why = "nothing published at " + src + " (is metaroced running with --sysfs-root " + o.published_root + "?)";
      return false;
    }
    if (!bind(src, o.sys_class + "/" + c, true, why)) return false;
  }
  if (mount(nullptr, o.sys_class.c_str(), nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
            nullptr) != 0) {
    *why = errno_text("read-only remount of the tmpfs on " + o.sys_class, errno);
    return false;
  }
  return true;
}

}  // namespace

ViewResult make_view(const ViewOptions& o) {
  ViewResult r;
  if (!enter_mount_namespace(&r.how, &r.why, &r.fallback_safe)) return r;
  // Opened in the new namespace: a bind mount's source must belong to it.
  int class_fd = open(o.sys_class.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (class_fd < 0) {
    r.why = errno_text("open " + o.sys_class, errno);
    return r;
  }
  std::vector<std::string> names;
  if (host_classes(class_fd, &names, &r.why)) {
    r.ok = build(o, class_fd, names, &r.why);
    if (!r.ok) umount2(o.sys_class.c_str(), MNT_DETACH);  // back to the host's /sys/class
  }
  close(class_fd);
  return r;
}

}  // namespace metaroce::launcher
