/* abi_check.c: sizes and offsets of the public structs as the C compiler lays them out, so
 * a Rust test can check its mirror (strata-sys/src/lib.rs) field by field. */
#include "strata.h"
#include "strata_channel.h"

#include <stddef.h>

#define F(type, field) offsetof(type, field)
__attribute__((visibility("default"))) size_t strata_abi_layout(size_t *out, size_t n) {
  size_t v[] = {
      sizeof(strata_place_t), F(strata_place_t, kind), F(strata_place_t, tier),
      F(strata_place_t, u),
      sizeof(strata_residency_t), F(strata_residency_t, tier_bytes),
      F(strata_residency_t, absent_bytes), F(strata_residency_t, pages),
      sizeof(strata_node_info_t), F(strata_node_info_t, cpulist),
      F(strata_node_info_t, total_bytes), F(strata_node_info_t, kernel_tier),
      F(strata_node_info_t, read_latency_ns), F(strata_node_info_t, write_bandwidth_mbps),
      F(strata_node_info_t, distance),
      sizeof(strata_topology_t), F(strata_topology_t, nodes), F(strata_topology_t, ntiers),
      F(strata_topology_t, tier_nodemask), F(strata_topology_t, tier_source),
      F(strata_topology_t, nodes_source),
      sizeof(strata_channel_header_t), F(strata_channel_header_t, version),
      F(strata_channel_header_t, pid), F(strata_channel_header_t, contexts_offset),
      F(strata_channel_header_t, objects_high), F(strata_channel_header_t, objects_dropped),
      F(strata_channel_header_t, priority), F(strata_channel_header_t, tracking),
      sizeof(strata_context_t), F(strata_context_t, size_class), F(strata_context_t, directive),
      F(strata_context_t, allocs), F(strata_context_t, bytes_allocated),
      F(strata_context_t, nframes), F(strata_context_t, rule), F(strata_context_t, frames),
      sizeof(strata_object_t), F(strata_object_t, len), F(strata_object_t, context),
      F(strata_object_t, next), F(strata_object_t, arena), F(strata_object_t, hint),
      STRATA_CHANNEL_VERSION, STRATA_CONTEXT_FRAMES, STRATA_DIRECTIVE_TIER0,
      STRATA_PRIORITY_HIGH, STRATA_PRIORITY_MAX, STRATA_TRACKING_WP_ASYNC,
      sizeof(STRATA_DAEMON_SOCKET_DEFAULT) - 1,
      sizeof(strata_agent_request_t), F(strata_agent_request_t, attempts),
      sizeof(strata_agent_counters_t), F(strata_agent_counters_t, fallbacks),
      F(strata_agent_counters_t, samples_touched), STRATA_AGENT_SAMPLE,
      sizeof(strata_agent_reply_t), F(strata_agent_reply_t, counters),
      STRATA_AGENT_MAGIC, STRATA_AGENT_MAX_PAGES, STRATA_TRACKING_MOVE,
      STRATA_OBJECT_RECORD_MAX, STRATA_AGENT_MAX_ATTEMPTS, sizeof(STRATA_CHANNEL_NAME) - 1,
      STRATA_CONTEXT_CAPACITY, STRATA_OBJECT_CAPACITY,
  };
  size_t k = sizeof v / sizeof v[0];
  for (size_t i = 0; i < k && i < n; i++) out[i] = v[i];
  return k;
}
