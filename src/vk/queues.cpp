// The queues recordings go to (the compute queue; a transfer-only family's queue with device_options::
// transfer_queue), the recordings' command buffers, and their ordering across queues by timeline semaphores
// (commands::after, sync_point).
#include <algorithm>
#include <array>

#include "vk_impl.hpp"

namespace cmfx::gpu {

namespace detail {

lane& device_impl::lane_of(uint32_t queue) {
  if (queue == 0) return compute;
  if (queue == 1 && transfer_lane) return *transfer_lane;
  throw gpu_error("sync_point of queue " + std::to_string(queue) + ": the device has no such queue");
}

std::unique_ptr<commands_impl> new_recording(device_impl& d, lane& l, bool transfer) {
  auto c = std::make_unique<commands_impl>();
  c->dev = &d;
  c->on = &l;
  c->transfer = transfer;
  if (!l.spare_cmds.empty()) {  // a finished recording's command buffer and fence (creating them is slow)
    c->cb = std::move(l.spare_cmds.back().first);
    c->fence = std::move(l.spare_cmds.back().second);
    l.spare_cmds.pop_back();
  } else {
    vk::raii::CommandBuffers cbs(d.dev, vk::CommandBufferAllocateInfo(*l.pool, vk::CommandBufferLevel::ePrimary, 1));
    c->cb = std::move(cbs.front());
    c->fence = vk::raii::Fence(d.dev, vk::FenceCreateInfo());
  }
  return c;
}

void submit_to_lane(device_impl& d, commands_impl& c) {
  lane& l = *c.on;
  const vk::CommandBuffer h = *c.cb;
  if (!d.info.timeline) {  // after() refused every wait
    l.queue.submit(vk::SubmitInfo({}, {}, h), *c.fence);
    return;
  }
  // At most one wait per queue (a timeline's values only grow: its largest point suffices); fixed arrays, as this
  // runs for every submission. The waits block every command of the recording: it is transfers only, or it starts
  // after the points anyway.
  std::array<vk::Semaphore, 2> sems;
  std::array<uint64_t, 2> values{};
  std::array<vk::PipelineStageFlags, 2> stages;
  uint32_t n = 0;
  for (uint32_t q = 0; q < 2; ++q) {
    uint64_t v = 0;
    for (const sync_point& p : c.waits)
      if (p.queue == q) v = std::max(v, p.value);
    if (v == 0) continue;
    sems[n] = *d.lane_of(q).timeline, values[n] = v, stages[n] = vk::PipelineStageFlagBits::eAllCommands;
    ++n;
  }
  const uint64_t next = l.submitted + 1;
  const vk::Semaphore signal = *l.timeline;
  const vk::TimelineSemaphoreSubmitInfo ti(n, values.data(), 1, &next);
  const vk::SubmitInfo si(n, sems.data(), stages.data(), 1, &h, 1, &signal, &ti);
  l.queue.submit(si, *c.fence);
  l.submitted = next;
  c.signalled = next;
  c.waits.clear();
}

}  // namespace detail

commands device::begin_transfer() {
  return detail::guarded("begin_transfer",
                         [&] { return commands(detail::new_recording(*p_, p_->xfer(), true)); });
}

sync_point device::last_submitted(uint32_t queue) const noexcept {
  const detail::lane& l = queue == 1 ? p_->xfer() : p_->compute;
  return {l.index, l.submitted};
}

void commands::after(sync_point p) {
  if (p.value == 0) return;
  if (!p_->dev->info.timeline)
    throw gpu_error("commands::after: the device has no timeline semaphores (Vulkan 1.2's timelineSemaphore)");
  const detail::lane& l = p_->dev->lane_of(p.queue);
  if (p.value > l.submitted)
    throw gpu_error("commands::after: sync point " + std::to_string(p.value) + " of queue " + std::to_string(p.queue) +
                    " not submitted yet (last " + std::to_string(l.submitted) + ")");
  p_->waits.push_back(p);
}

sync_point commands::done() const {
  if (p_->signalled == 0)
    throw gpu_error("commands::done: the recording was not submitted (or the device has no timeline semaphores)");
  return {p_->on->index, p_->signalled};
}

bool commands::transfer() const noexcept { return p_->transfer; }

uint64_t device::validation_errors() const noexcept { return p_->validation_errors.load(); }

}  // namespace cmfx::gpu
