// Device matching, context open/close, the async-event watcher, and the
// device/port queries.
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "provider/mroce.h"

namespace {

void close_if(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

// Forwards one async record to the application's async fd. The pipe is
// non-blocking: an application that never reads events must not wedge the
// watcher (which also detects the daemon going away).
void deliver_async(struct mroce_context *ctx, const struct mroce_async_event *ev) {
  ssize_t n;
  do {
    n = write(ctx->async_wr_fd, ev, sizeof(*ev));
  } while (n < 0 && errno == EINTR);
}

void deliver_fatal(struct mroce_context *ctx) {
  mroce_mark_dead(ctx);
  struct mroce_async_event ev = {};
  ev.element = 1;  // port number, as for the kernel's device-wide events
  ev.event_type = IBV_EVENT_DEVICE_FATAL;
  deliver_async(ctx, &ev);
  mroce_wake_channels(ctx);
}

// Relays whole records read from the daemon's async fd; false at EOF/error.
bool relay_async(struct mroce_context *ctx) {
  struct mroce_async_event evs[16];
  ssize_t n = read(ctx->daemon_async_fd, evs, sizeof(evs));
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  for (size_t i = 0; i < static_cast<size_t>(n) / sizeof(evs[0]); i++) deliver_async(ctx, &evs[i]);
  return true;
}

// The watcher: relays daemon async records and turns a hang-up of the
// control socket or of the async fd into IBV_EVENT_DEVICE_FATAL.
void *watcher_main(void *arg) {
  auto *ctx = static_cast<struct mroce_context *>(arg);
  struct pollfd p[3] = {{ctx->stop_fd, POLLIN, 0},
                        {ctx->ctrl_fd, POLLRDHUP, 0},
                        {ctx->daemon_async_fd, POLLIN, 0}};
  for (;;) {
    int r = poll(p, 3, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || (p[0].revents & POLLIN)) return nullptr;
    if (p[1].revents & (POLLHUP | POLLRDHUP | POLLERR)) break;
    if (p[2].revents & POLLIN) {
      if (!relay_async(ctx)) break;
    } else if (p[2].revents & (POLLHUP | POLLERR)) {
      break;
    }
  }
  deliver_fatal(ctx);
  return nullptr;
}

int open_request(struct mroce_context *ctx) {
  struct mroce_open_context_req req = {MROCE_ABI_VERSION, 0};
  struct mroce_open_context_resp resp;
  int fds[2];
  struct mroce_call call = {MROCE_OP_OPEN_CONTEXT, &req, sizeof(req), -1, &resp, sizeof(resp),
                            fds, 2};
  int err = mroce_ctrl_call(ctx, &call);
  if (err) return err;
  ctx->doorbell_fd = fds[0];
  ctx->daemon_async_fd = fds[1];
  ctx->ctx_id = resp.ctx_id;
  ctx->dev_attr = resp.device;
  ctx->port_attr = resp.port;
  struct mroce_call ex = {MROCE_OP_QUERY_DEVICE_EX, nullptr, 0, -1, &ctx->dev_attr_ex,
                          sizeof(ctx->dev_attr_ex), nullptr, 0};
  if (mroce_ctrl_call(ctx, &ex)) memset(&ctx->dev_attr_ex, 0, sizeof(ctx->dev_attr_ex));
  return 0;
}

int start_watcher(struct mroce_context *ctx) {
  int p[2];
  if (pipe2(p, O_CLOEXEC)) return errno;
  fcntl(p[1], F_SETFL, O_NONBLOCK);
  ctx->ibv_ctx.context.async_fd = p[0];
  ctx->async_wr_fd = p[1];
  ctx->stop_fd = eventfd(0, EFD_CLOEXEC);
  if (ctx->stop_fd < 0) return errno;
  int err = pthread_create(&ctx->watcher, nullptr, watcher_main, ctx);
  if (err) return err;
  ctx->watcher_started = true;
  return 0;
}

int connect_socket(const char *path) {
  struct sockaddr_un sa = {};
  sa.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof(sa.sun_path)) return -ENAMETOOLONG;
  strcpy(sa.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  if (connect(fd, reinterpret_cast<struct sockaddr *>(&sa), sizeof(sa))) {
    int err = errno;
    close(fd);
    // No daemon behind the published device: the device is not there.
    return (err == ENOENT || err == ECONNREFUSED) ? -ENODEV : -err;
  }
  return fd;
}

struct verbs_device *mroce_alloc_device(struct verbs_sysfs_dev *sysfs_dev) {
  auto *dev = static_cast<struct mroce_device *>(calloc(1, sizeof(struct mroce_device)));
  if (!dev) return nullptr;
  if (mroce_resolve_socket(sysfs_dev->ibdev_path, sysfs_dev->ibdev_name, dev->socket_path,
                           sizeof(dev->socket_path))) {
    free(dev);
    return nullptr;
  }
  return &dev->ibv_dev;
}

void mroce_uninit_device(struct verbs_device *vdev) {
  free(reinterpret_cast<struct mroce_device *>(vdev));
}

struct verbs_context *mroce_alloc_context(struct ibv_device *ibdev, int cmd_fd, void *) {
  struct mroce_device *dev = to_mroce_dev(ibdev);
  struct mroce_context *ctx =
      verbs_init_and_alloc_context(ibdev, cmd_fd, ctx, ibv_ctx, 0 /* RDMA_DRIVER_UNKNOWN */);
  if (!ctx) return nullptr;
  // Re-read the published socket path: the daemon may have restarted.
  struct verbs_sysfs_dev *sysfs = dev->ibv_dev.sysfs;
  if (sysfs) mroce_resolve_socket(sysfs->ibdev_path, sysfs->ibdev_name, dev->socket_path,
                                  sizeof(dev->socket_path));
  int fd = connect_socket(dev->socket_path);
  int err = fd < 0 ? -fd : mroce_context_open(ctx, fd);
  if (err) {
    if (fd >= 0) mroce_context_close(ctx);
    verbs_uninit_context(&ctx->ibv_ctx);
    free(ctx);
    errno = err;
    return nullptr;
  }
  mroce_set_ops(ctx);
  return &ctx->ibv_ctx;
}

void mroce_free_context(struct ibv_context *ibctx) {
  struct mroce_context *ctx = to_mroce_ctx(ibctx);
  mroce_context_close(ctx);
  verbs_uninit_context(&ctx->ibv_ctx);  // closes cmd_fd and async_fd
  free(ctx);
}

// What one context can create: the device's capacity or the daemon's
// per-context limit, whichever is smaller (0: an older daemon sent none).
uint32_t ctx_limit(uint32_t device, uint32_t per_context) {
  return per_context && per_context < device ? per_context : device;
}

// Only what the device really does: RNR NAKs (RC receiver not ready) and a
// system image GUID (memory windows are added when the daemon has them).
// No port shutdown/change, no XRC, no SRQ resize, no checksum offloads, no
// N_NOTIFY.
constexpr unsigned int kDeviceCapFlags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SYS_IMAGE_GUID;

void fill_device_attr(const struct mroce_device_attr *d, const struct mroce_device_attr_ex *x,
                      struct ibv_device_attr *a) {
  memset(a, 0, sizeof(*a));
  snprintf(a->fw_ver, sizeof(a->fw_ver), "%.*s", static_cast<int>(sizeof(d->fw_ver)), d->fw_ver);
  a->node_guid = htobe64(d->node_guid);
  a->sys_image_guid = htobe64(d->node_guid);
  a->max_mr_size = d->max_mr_size;
  a->page_size_cap = ~uint64_t{4095};
  a->vendor_id = d->vendor_id;
  a->vendor_part_id = d->vendor_part_id;
  a->hw_ver = d->hw_ver;
  a->max_qp = static_cast<int>(ctx_limit(d->max_qp, x->ctx_max_qp));
  a->max_qp_wr = d->max_qp_wr;
  a->device_cap_flags = kDeviceCapFlags;
  a->max_sge = d->max_sge;
  a->max_sge_rd = d->max_sge;
  a->max_cq = static_cast<int>(ctx_limit(d->max_cq, x->ctx_max_cq));
  a->max_cqe = d->max_cqe;
  a->max_mr = static_cast<int>(ctx_limit(d->max_mr, x->ctx_max_mr));
  a->max_pd = static_cast<int>(ctx_limit(d->max_pd, x->ctx_max_pd));
  a->max_mw = static_cast<int>(x->max_mw);  // mw: 0 from a daemon without memory windows
  if (x->max_mw)  // type 1, and type 2 associated with a QP and checked against its PD (2B)
    a->device_cap_flags |= IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  a->max_qp_rd_atom = d->max_qp_rd_atom;
  a->max_qp_init_rd_atom = d->max_qp_rd_atom;
  a->max_res_rd_atom = d->max_qp_rd_atom * a->max_qp;
  a->atomic_cap = IBV_ATOMIC_HCA;  // atomic among this NIC's own accesses
  a->max_srq = static_cast<int>(ctx_limit(x->max_srq, x->ctx_max_srq));  // 0: no SRQs
  a->max_srq_wr = static_cast<int>(x->max_srq_wr);
  a->max_srq_sge = static_cast<int>(x->max_srq_sge);
  a->max_pkeys = 1;
  a->max_ah = static_cast<int>(ctx_limit(d->max_ah, x->ctx_max_ah));
  a->max_mcast_grp = static_cast<int>(x->max_mcast_grp);
  a->max_mcast_qp_attach = static_cast<int>(x->max_mcast_qp_attach);
  a->max_total_mcast_qp_attach = static_cast<int>(x->max_mcast_grp * x->max_mcast_qp_attach);
  a->local_ca_ack_delay = 15;
  a->phys_port_cnt = 1;
}

// The extended part: one port; no ODP, timestamps (hca_core_clock 0: the
// NIC does not stamp CQEs), TSO, RSS, WQs, pacing, tag matching, CQ
// moderation, device memory or PCIe atomics, so all of it is 0.
void fill_device_attr_ex(const struct mroce_context *ctx, struct ibv_device_attr_ex *ex) {
  memset(ex, 0, sizeof(*ex));
  fill_device_attr(&ctx->dev_attr, &ctx->dev_attr_ex, &ex->orig_attr);
  ex->phys_port_cnt_ex = 1;
}

}  // namespace

int mroce_resolve_socket(const char *ibdev_path, const char *ibdev_name, char *out, size_t len) {
  char file[IBV_SYSFS_PATH_MAX + 32];
  snprintf(file, sizeof(file), "%s/%s", ibdev_path, MROCE_SOCKET_FILE);
  FILE *f = fopen(file, "re");
  if (f) {
    char line[256] = "";
    bool ok = fgets(line, sizeof(line), f) != nullptr;
    fclose(f);
    line[strcspn(line, "\r\n")] = 0;
    if (ok && line[0] == '/' && strlen(line) < len) {
      strcpy(out, line);
      return 0;
    }
  }
  int n = snprintf(out, len, "%s/%s.sock", MROCE_DEFAULT_RUN_DIR, ibdev_name);
  return (n < 0 || static_cast<size_t>(n) >= len) ? ENAMETOOLONG : 0;
}

int mroce_context_open(struct mroce_context *ctx, int ctrl_fd) {
  ctx->ctrl_fd = ctrl_fd;
  ctx->doorbell_fd = ctx->daemon_async_fd = ctx->async_wr_fd = ctx->stop_fd = -1;
  pthread_mutex_init(&ctx->ctrl_lock, nullptr);
  pthread_mutex_init(&ctx->qp_lock, nullptr);
  ctx->ibv_ctx.context.num_comp_vectors = 1;
  int err = open_request(ctx);
  if (!err) err = start_watcher(ctx);
  return err;
}

void mroce_context_close(struct mroce_context *ctx) {
  if (ctx->watcher_started) {
    uint64_t one = 1;
    if (write(ctx->stop_fd, &one, sizeof(one)) < 0) { /* cannot fail on an eventfd */ }
    pthread_join(ctx->watcher, nullptr);
    ctx->watcher_started = false;
  }
  close_if(&ctx->stop_fd);
  close_if(&ctx->async_wr_fd);
  close_if(&ctx->daemon_async_fd);
  close_if(&ctx->doorbell_fd);
  close_if(&ctx->ctrl_fd);
  pthread_mutex_destroy(&ctx->ctrl_lock);
  pthread_mutex_destroy(&ctx->qp_lock);
}

int mroce_query_device_ex(struct ibv_context *context,
                          const struct ibv_query_device_ex_input *input,
                          struct ibv_device_attr_ex *attr, size_t attr_size) {
  struct mroce_context *ctx = to_mroce_ctx(context);
  if (input && input->comp_mask) return EINVAL;
  if (attr_size < sizeof(struct ibv_device_attr)) return EINVAL;
  if (mroce_dead(ctx)) return EIO;
  struct ibv_device_attr_ex ex;
  fill_device_attr_ex(ctx, &ex);
  memcpy(attr, &ex, attr_size < sizeof(ex) ? attr_size : sizeof(ex));
  return 0;
}

int mroce_query_port(struct ibv_context *context, uint8_t port, struct ibv_port_attr *attr) {
  struct mroce_context *ctx = to_mroce_ctx(context);
  if (port != 1) return EINVAL;
  struct mroce_handle_req req = {port, 0};
  struct mroce_port_attr pa;
  struct mroce_call call = {MROCE_OP_QUERY_PORT, &req, sizeof(req), -1, &pa, sizeof(pa),
                            nullptr, 0};
  int err = mroce_ctrl_call(ctx, &call);
  if (err) return err;
  ctx->port_attr = pa;
  memset(attr, 0, sizeof(*attr));
  attr->state = static_cast<enum ibv_port_state>(pa.state);
  attr->max_mtu = static_cast<enum ibv_mtu>(pa.max_mtu);
  attr->active_mtu = static_cast<enum ibv_mtu>(pa.active_mtu);
  attr->gid_tbl_len = static_cast<int>(pa.gid_tbl_len);
  attr->port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;
  attr->max_msg_sz = ctx->dev_attr.max_msg_size;
  attr->pkey_tbl_len = 1;
  attr->max_vl_num = 1;
  attr->active_width = pa.active_width;
  attr->active_speed = pa.active_speed;
  attr->phys_state = pa.phys_state;
  attr->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

// The tables name only what they set; an omitted op stays NULL, which
// libibverbs replaces with its dummy (EOPNOTSUPP). g++ would warn on that.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

// Devices are published as metaroce<N>; libibverbs matches the modalias
// string "rdma_device:N<ibdev>" it builds from the name (no netlink here).
const struct verbs_match_ent mroce_match_table[] = {
    {nullptr, {"rdma_device:*N" MROCE_DRIVER_NAME "*"}, 0, 0, VERBS_MATCH_MODALIAS},
    {},
};

const struct verbs_device_ops mroce_dev_ops = {
    .name = MROCE_DRIVER_NAME,
    .match_min_abi_version = 0,
    .match_max_abi_version = INT32_MAX,
    .match_table = mroce_match_table,
    .static_providers = nullptr,
    .match_device = nullptr,
    .alloc_context = mroce_alloc_context,
    .import_context = nullptr,
    .alloc_device = mroce_alloc_device,
    .uninit_device = mroce_uninit_device,
};

static const struct verbs_context_ops mroce_ctx_ops = {
    .alloc_mw = mroce_alloc_mw,
    .alloc_pd = mroce_alloc_pd,
    .attach_mcast = mroce_attach_mcast,
    .bind_mw = mroce_bind_mw,
    .cq_event = mroce_cq_event,
    .create_ah = mroce_create_ah,
    .create_cq = mroce_create_cq,
    .create_cq_ex = mroce_create_cq_ex,
    .create_qp = mroce_create_qp,
    .create_qp_ex = mroce_create_qp_ex,
    .create_srq = mroce_create_srq,
    .dealloc_mw = mroce_dealloc_mw,
    .dealloc_pd = mroce_dealloc_pd,
    .dereg_mr = mroce_dereg_mr,
    .destroy_ah = mroce_destroy_ah,
    .destroy_cq = mroce_destroy_cq,
    .destroy_qp = mroce_destroy_qp,
    .destroy_srq = mroce_destroy_srq,
    .detach_mcast = mroce_detach_mcast,
    .free_context = mroce_free_context,
    .modify_qp = mroce_modify_qp,
    .modify_srq = mroce_modify_srq,
    .poll_cq = mroce_poll_cq,
    .post_recv = mroce_post_recv,
    .post_send = mroce_post_send,
    .post_srq_recv = mroce_post_srq_recv,
    .query_device_ex = mroce_query_device_ex,
    .query_port = mroce_query_port,
    .query_qp = mroce_query_qp,
    .query_srq = mroce_query_srq,
    .reg_mr = mroce_reg_mr,
    .req_notify_cq = mroce_req_notify_cq,
};

#pragma GCC diagnostic pop

void mroce_set_ops(struct mroce_context *ctx) { verbs_set_ops(&ctx->ibv_ctx, &mroce_ctx_ops); }
