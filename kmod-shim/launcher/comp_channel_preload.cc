// libmetaroce-preload.so: completion channels for MetaRoCE devices without
// a kernel. LD_PRELOADed by metaroce-run.
//
// libibverbs' ibv_create_comp_channel asks the kernel (through the command
// fd) for an event fd. For metaroce devices this library makes the channel
// itself: channel->fd is one end of a datagram socketpair, the other is kept
// here, where the provider finds it (metaroce_comp_channel_peer) and passes
// it to the daemon in CREATE_CQ. The daemon writes 8-byte CQ handles to it,
// which is exactly what ibv_get_cq_event reads. Other devices go to
// libibverbs' own functions.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

namespace {

struct Channel {
  struct ibv_comp_channel *channel;
  int peer_fd;
  Channel *next;
};

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
Channel *g_channels = nullptr;

bool is_metaroce(struct ibv_context *context) {
  const char *name = context && context->device ? ibv_get_device_name(context->device) : nullptr;
  return name && strncmp(name, "metaroce", 8) == 0;
}

template <class Fn>
Fn next_symbol(const char *name) {
  return reinterpret_cast<Fn>(dlvsym(RTLD_NEXT, name, "IBVERBS_1.0"));
}

// Unlinks and returns the entry for `channel`, or nullptr.
Channel *take(struct ibv_comp_channel *channel) {
  for (Channel **p = &g_channels; *p; p = &(*p)->next)
    if ((*p)->channel == channel) {
      Channel *c = *p;
      *p = c->next;
      return c;
    }
  return nullptr;
}

struct ibv_comp_channel *create_metaroce_channel(struct ibv_context *context) {
  auto *c = static_cast<Channel *>(calloc(1, sizeof(Channel)));
  auto *ch = static_cast<struct ibv_comp_channel *>(malloc(sizeof(struct ibv_comp_channel)));
  int p[2];
  // A datagram socketpair, not a pipe: the daemon accepts only sockets it
  // can write with MSG_DONTWAIT (a pipe's blocking mode is the client's to
  // change), and each 8-byte record stays one read for ibv_get_cq_event.
  if (!c || !ch || socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, p)) {
    free(c);
    free(ch);
    return nullptr;
  }
  // The daemon must never block on a channel nobody reads.
  fcntl(p[1], F_SETFL, O_NONBLOCK);
  ch->context = context;
  ch->fd = p[0];
  ch->refcnt = 0;
  c->channel = ch;
  c->peer_fd = p[1];
  pthread_mutex_lock(&g_lock);
  c->next = g_channels;
  g_channels = c;
  pthread_mutex_unlock(&g_lock);
  return ch;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) struct ibv_comp_channel *ibv_create_comp_channel(
    struct ibv_context *context) {
  if (is_metaroce(context)) return create_metaroce_channel(context);
  using Fn = struct ibv_comp_channel *(*)(struct ibv_context *);
  static Fn real = next_symbol<Fn>("ibv_create_comp_channel");
  if (!real) {
    errno = ENOSYS;
    return nullptr;
  }
  return real(context);
}

__attribute__((visibility("default"))) int ibv_destroy_comp_channel(
    struct ibv_comp_channel *channel) {
  pthread_mutex_lock(&g_lock);
  bool ours = false;
  for (Channel *c = g_channels; c; c = c->next) ours |= c->channel == channel;
  pthread_mutex_unlock(&g_lock);
  if (!ours) {
    using Fn = int (*)(struct ibv_comp_channel *);
    static Fn real = next_symbol<Fn>("ibv_destroy_comp_channel");
    return real ? real(channel) : ENOSYS;
  }
  // Same rule as libibverbs: refused while CQs still use the channel.
  pthread_mutex_lock(&channel->context->mutex);
  if (channel->refcnt) {
    pthread_mutex_unlock(&channel->context->mutex);
    return EBUSY;
  }
  pthread_mutex_unlock(&channel->context->mutex);
  pthread_mutex_lock(&g_lock);
  Channel *c = take(channel);
  pthread_mutex_unlock(&g_lock);
  if (c) {
    close(c->peer_fd);
    free(c);
  }
  close(channel->fd);
  free(channel);
  return 0;
}

// For the provider (found with dlsym(RTLD_DEFAULT)): the daemon-side end of
// the channel whose fd is `channel_fd`, or -1 if it is not one of ours.
__attribute__((visibility("default"))) int metaroce_comp_channel_peer(int channel_fd) {
  int peer = -1;
  pthread_mutex_lock(&g_lock);
  for (Channel *c = g_channels; c; c = c->next)
    if (c->channel->fd == channel_fd) peer = c->peer_fd;
  pthread_mutex_unlock(&g_lock);
  return peer;
}

}  // extern "C"
