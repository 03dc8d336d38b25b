// Tensor maps (TMA descriptors, compute capability 9.0): what FlashAttention 3 and CUTLASS's
// Hopper kernels build on the host before every launch. A descriptor is opaque to the program
// and only a kernel reads it; the simulator's kernels do not run, so what matters is the
// driver's answer: the argument checks cuda.h documents for cuTensorMapEncodeTiled and
// cuTensorMapEncodeIm2col (CUDA_ERROR_INVALID_VALUE, as the driver answers), and a descriptor
// that records the address, so that cuTensorMapReplaceAddress works on it.
#include <cstring>

#include "sim.h"

using namespace simgpu;

namespace {

constexpr uint64_t kTensorMapMagic = 0x53494d544d415031;  // "SIMTMAP1"
constexpr cuuint32_t kMaxRank = 5;

// Bytes of one element; 0 for a type cuda.h does not define. The packed types count a U4 or
// U6 value as the unit of globalDim; their strides and boxes are checked as bytes of 16 values.
size_t element_bytes(CUtensorMapDataType type) {
  switch (type) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8: return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ: return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64: return 8;
    case CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B:
    case CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B:
    case CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B: return 1;  // boxes of 128 values: a multiple of 16 bytes
    default: return 0;
  }
}

bool packed_16b(CUtensorMapDataType type) {
  return type == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B || type == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B;
}

bool aligned(const void* p, uintptr_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

// The checks both encoders share: the map, type, rank, address, sizes, strides, layout
// enums. `box_inner_bytes` is the inner extent a swizzle must hold (0: not checked).
CUresult check_common(const CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, const void* address,
                      const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* element_strides,
                      CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                      CUtensorMapFloatOOBfill oob, size_t box_inner_bytes) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!map || !aligned(map, 64) || !dims || !element_strides || !address) return CUDA_ERROR_INVALID_VALUE;
  if (element_bytes(type) == 0) return CUDA_ERROR_INVALID_VALUE;
  if (rank == 0 || rank > kMaxRank) return CUDA_ERROR_INVALID_VALUE;
  if (interleave > CU_TENSOR_MAP_INTERLEAVE_32B || swizzle > CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B ||
      l2 > CU_TENSOR_MAP_L2_PROMOTION_L2_256B || oob > CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA)
    return CUDA_ERROR_INVALID_VALUE;
  if (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE && rank < 3) return CUDA_ERROR_INVALID_VALUE;
  if (interleave == CU_TENSOR_MAP_INTERLEAVE_32B && swizzle != CU_TENSOR_MAP_SWIZZLE_32B) return CUDA_ERROR_INVALID_VALUE;
  bool wide = interleave == CU_TENSOR_MAP_INTERLEAVE_32B || packed_16b(type);
  if (!aligned(address, wide ? 32 : 16)) return CUDA_ERROR_INVALID_VALUE;
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > (1ull << 32)) return CUDA_ERROR_INVALID_VALUE;
    if (element_strides[i] == 0 || element_strides[i] > 8) return CUDA_ERROR_INVALID_VALUE;
  }
  if (packed_16b(type) && dims[0] % 128 != 0) return CUDA_ERROR_INVALID_VALUE;
  if (type == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B && dims[0] % 2 != 0) return CUDA_ERROR_INVALID_VALUE;
  if (rank > 1 && !strides) return CUDA_ERROR_INVALID_VALUE;
  for (cuuint32_t i = 0; i + 1 < rank; ++i) {
    if (strides[i] % (wide ? 32 : 16) != 0 || strides[i] >= (1ull << 40)) return CUDA_ERROR_INVALID_VALUE;
  }
  if (oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA) {
    bool is_float = type >= CU_TENSOR_MAP_DATA_TYPE_FLOAT16 && type <= CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ;
    if (!is_float) return CUDA_ERROR_INVALID_VALUE;
  }
  if (interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && swizzle != CU_TENSOR_MAP_SWIZZLE_NONE && box_inner_bytes) {
    size_t span = swizzle == CU_TENSOR_MAP_SWIZZLE_32B ? 32 : swizzle == CU_TENSOR_MAP_SWIZZLE_64B ? 64 : 128;
    if (box_inner_bytes > span) return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// The descriptor: a tag, the address and what was asked, so a debugger (or a test) can read it.
void encode(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address, const cuuint64_t* dims) {
  std::memset(map, 0, sizeof *map);
  map->opaque[0] = kTensorMapMagic;
  map->opaque[1] = reinterpret_cast<uint64_t>(address);
  map->opaque[2] = (uint64_t(type) << 32) | rank;
  for (cuuint32_t i = 0; i < rank && 3 + i < CU_TENSOR_MAP_NUM_QWORDS; ++i) map->opaque[3 + i] = dims[i];
}

}  // namespace

SIM_API CUresult cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
                                        const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                        const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                        CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                        CUtensorMapFloatOOBfill oob) {
  if (!box) return CUDA_ERROR_INVALID_VALUE;
  for (cuuint32_t i = 0; i < rank && i < kMaxRank; ++i)
    if (box[i] == 0 || box[i] > 256) return CUDA_ERROR_INVALID_VALUE;
  size_t inner = rank ? box[0] * element_bytes(type) : 0;
  if (rank && interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && inner % 16 != 0) return CUDA_ERROR_INVALID_VALUE;
  if (rank && packed_16b(type) && box[0] != 128) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = check_common(map, type, rank, address, dims, strides, element_strides, interleave, swizzle, l2, oob,
                            packed_16b(type) ? 0 : inner);
  if (r != CUDA_SUCCESS) return r;
  encode(map, type, rank, address, dims);
  return CUDA_SUCCESS;
}

// Im2col: rank 3 to 5; the bounding box's corners in each of the rank - 2 spatial dimensions
// lie in [-2^15, 2^15) for rank 3, [-2^7, 2^7) for 4, [-2^4, 2^4) for 5 (cuda.h); channels and
// pixels per column up to 256.
SIM_API CUresult cuTensorMapEncodeIm2col(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
                                         const cuuint64_t* dims, const cuuint64_t* strides, const int* lower,
                                         const int* upper, cuuint32_t channels, cuuint32_t pixels,
                                         const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                         CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                         CUtensorMapFloatOOBfill oob) {
  if (rank < 3 || rank > kMaxRank || !lower || !upper) return CUDA_ERROR_INVALID_VALUE;
  if (channels == 0 || channels > 256 || pixels == 0 || pixels > 256) return CUDA_ERROR_INVALID_VALUE;
  int bits = rank == 3 ? 16 : rank == 4 ? 8 : 5;  // the corners' range shrinks with the dimensions
  for (cuuint32_t i = 0; i < rank - 2; ++i) {
    if (lower[i] < -(1 << (bits - 1)) || lower[i] >= (1 << (bits - 1))) return CUDA_ERROR_INVALID_VALUE;
    if (upper[i] < -(1 << (bits - 1)) || upper[i] >= (1 << (bits - 1))) return CUDA_ERROR_INVALID_VALUE;
  }
  CUresult r = check_common(map, type, rank, address, dims, strides, element_strides, interleave, swizzle, l2, oob,
                            channels * element_bytes(type));
  if (r != CUDA_SUCCESS) return r;
  encode(map, type, rank, address, dims);
  return CUDA_SUCCESS;
}

// A descriptor made by one of the encoders, pointed at another address of the same alignment.
SIM_API CUresult cuTensorMapReplaceAddress(CUtensorMap* map, void* address) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!map || !aligned(map, 64) || !address || map->opaque[0] != kTensorMapMagic) return CUDA_ERROR_INVALID_VALUE;
  auto type = static_cast<CUtensorMapDataType>(map->opaque[2] >> 32);
  if (!aligned(address, packed_16b(type) ? 32 : 16)) return CUDA_ERROR_INVALID_VALUE;
  map->opaque[1] = reinterpret_cast<uint64_t>(address);
  return CUDA_SUCCESS;
}
