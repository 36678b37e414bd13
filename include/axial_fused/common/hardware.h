// The hardware budgets the kernels' configurations are sized against, named once.
#pragma once
#include <cstddef>

namespace axial_fused {

// Shared memory of an sm_90 SM, what one block may opt in to, and what the driver reserves for each
// resident block: two blocks an SM have (228 KiB / 2 - 1 KiB) = 113 KiB each, three 75 KiB.
constexpr size_t kSmemPerSm = 228 * 1024;
constexpr size_t kSmemPerBlock = 227 * 1024;
constexpr size_t kSmemReservedPerBlock = 1024;
constexpr size_t smem_per_block(int blocks_per_sm) { return kSmemPerSm / blocks_per_sm - kSmemReservedPerBlock; }
static_assert(smem_per_block(1) == kSmemPerBlock, "one block an SM may opt in to all but the reservation");

}  // namespace axial_fused
