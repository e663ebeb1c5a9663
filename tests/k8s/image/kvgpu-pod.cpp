// The one program in the images the real kubelet node runs (tests/k8s/node.py builds it static
// and packs it into OCI images imported with `ctr`; nothing is pulled):
//
//   /pause            the pod sandbox's process (containerd's sandbox_image): holds the pod's
//                     namespaces, reaps orphans, exits 0 on SIGINT or SIGTERM.
//   /kvgpu-pod [KEY]  a workload container: prints "env NAME=VALUE" for each variable of its
//                     environment whose name starts with KEY (all when absent), "dev PATH
//                     MAJOR:MINOR" for each character device under /dev/vfio, then "ready", and
//                     waits as /pause does. Its log (kubelet's /var/log/pods) shows what Allocate
//                     handed the container.
#include <dirent.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>

extern char** environ;

namespace {

volatile std::sig_atomic_t stop = 0;

void OnStop(int) {
  stop = 1;
}

void OnChild(int) {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

int WaitForStop() {
  struct sigaction action = {};
  action.sa_handler = OnStop;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  action.sa_handler = OnChild;
  action.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &action, nullptr);
  while (stop == 0) pause();
  return 0;
}

// The device nodes the runtime put into the container (a VFIO group's, for a vGPU).
void PrintVfioDevices() {
  DIR* dir = opendir("/dev/vfio");
  if (dir == nullptr) return;
  while (const dirent* entry = readdir(dir)) {
    char path[300];
    std::snprintf(path, sizeof path, "/dev/vfio/%s", entry->d_name);
    struct stat st = {};
    if (stat(path, &st) == 0 && S_ISCHR(st.st_mode)) {
      std::printf("dev %s %u:%u\n", path, major(st.st_rdev), minor(st.st_rdev));
    }
  }
  closedir(dir);
}

}  // namespace

int main(int argc, char** argv) {
  const char* name = std::strrchr(argv[0], '/');
  name = name == nullptr ? argv[0] : name + 1;
  if (std::strcmp(name, "pause") != 0) {
    const char* key = argc > 1 ? argv[1] : "";
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, key, std::strlen(key)) == 0) std::printf("env %s\n", *e);
    }
    PrintVfioDevices();
    std::printf("ready\n");
    std::fflush(stdout);
  }
  return WaitForStop();
}
