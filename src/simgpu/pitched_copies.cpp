// 2D and 3D copies (cuMemcpy2D*, cuMemcpy3D*, and the array copies built on them): one Op of
// `Height` rows in `Depth` slices, each operand with its own pitch, run row by row by
// run_copy (transfers.cpp), so the bytes really move and take their modelled time. Host,
// device and unified operands are addresses (device memory is host memory); an array operand
// is the array's linear memory (arrays.cpp), rows of its width.
#include <cstring>

#include "sim.h"

namespace simgpu {

namespace {

struct Operand {
  unsigned char* base = nullptr;
  size_t pitch = 0, height = 0;
};

CUresult resolve(CUmemorytype type, const void* host, CUdeviceptr device, CUarray array, size_t pitch, size_t height,
                 Operand* out) {
  switch (type) {
    case CU_MEMORYTYPE_HOST: out->base = static_cast<unsigned char*>(const_cast<void*>(host)); break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED: out->base = reinterpret_cast<unsigned char*>(device); break;
    case CU_MEMORYTYPE_ARRAY: {
      size_t bytes = 0;
      if (!array_memory(array, &out->base, &out->pitch, &out->height, &bytes)) return CUDA_ERROR_INVALID_HANDLE;
      return CUDA_SUCCESS;  // an array's pitch and height are its own (cuda.h: the caller's are ignored)
    }
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  if (!out->base) return CUDA_ERROR_INVALID_VALUE;
  out->pitch = pitch;
  out->height = height;
  return CUDA_SUCCESS;
}

}  // namespace

CUDA_MEMCPY3D copy2d_as_3d(const CUDA_MEMCPY2D& p) {
  CUDA_MEMCPY3D c{};
  c.srcXInBytes = p.srcXInBytes, c.srcY = p.srcY, c.srcMemoryType = p.srcMemoryType, c.srcHost = p.srcHost;
  c.srcDevice = p.srcDevice, c.srcArray = p.srcArray, c.srcPitch = p.srcPitch;
  c.dstXInBytes = p.dstXInBytes, c.dstY = p.dstY, c.dstMemoryType = p.dstMemoryType, c.dstHost = p.dstHost;
  c.dstDevice = p.dstDevice, c.dstArray = p.dstArray, c.dstPitch = p.dstPitch;
  c.WidthInBytes = p.WidthInBytes, c.Height = p.Height, c.Depth = 1;
  return c;
}

CUresult copy3d_op(const CUDA_MEMCPY3D& p, Op* op) {
  if (p.srcLOD || p.dstLOD || p.reserved0 || p.reserved1) return CUDA_ERROR_INVALID_VALUE;
  Operand src, dst;
  CUresult r = resolve(p.srcMemoryType, p.srcHost, p.srcDevice, p.srcArray, p.srcPitch, p.srcHeight, &src);
  if (r == CUDA_SUCCESS) r = resolve(p.dstMemoryType, p.dstHost, p.dstDevice, p.dstArray, p.dstPitch, p.dstHeight, &dst);
  if (r != CUDA_SUCCESS) return r;
  size_t height = p.Height ? p.Height : 1, depth = p.Depth ? p.Depth : 1;
  // cuda.h: a pitch is at least the width; a height at least the rows copied when Depth > 1.
  bool multi_row = height > 1 || depth > 1;
  if (multi_row && (src.pitch < p.srcXInBytes + p.WidthInBytes || dst.pitch < p.dstXInBytes + p.WidthInBytes))
    return CUDA_ERROR_INVALID_VALUE;
  if (depth > 1 && (src.height < p.srcY + height || dst.height < p.dstY + height)) return CUDA_ERROR_INVALID_VALUE;
  op->kind = Op::copy;
  op->bytes = p.WidthInBytes;
  op->height = height;
  op->depth = depth;
  op->src_pitch = src.pitch, op->dst_pitch = dst.pitch;
  op->src_slice = src.pitch * src.height, op->dst_slice = dst.pitch * dst.height;
  op->src = src.base + p.srcZ * op->src_slice + p.srcY * src.pitch + p.srcXInBytes;
  op->dst = dst.base + p.dstZ * op->dst_slice + p.dstY * dst.pitch + p.dstXInBytes;
  // An array operand must hold the whole copy (its memory is the simulator's to check).
  if (p.srcMemoryType == CU_MEMORYTYPE_ARRAY || p.dstMemoryType == CU_MEMORYTYPE_ARRAY) {
    auto within = [&](CUarray a, const void* at, size_t span) {
      unsigned char* base;
      size_t pitch, rows, bytes;
      array_memory(a, &base, &pitch, &rows, &bytes);
      auto* b = static_cast<const unsigned char*>(at);
      return b >= base && b + span <= base + bytes;
    };
    if (p.srcMemoryType == CU_MEMORYTYPE_ARRAY && !within(p.srcArray, op->src, src_extent(*op))) return CUDA_ERROR_INVALID_VALUE;
    if (p.dstMemoryType == CU_MEMORYTYPE_ARRAY && !within(p.dstArray, op->dst, dst_extent(*op))) return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult submit_copy(const Op& op, CUstream h, bool async, bool per_thread) {
  if (op.bytes == 0) return CUDA_SUCCESS;
  Stream* st = resolve_stream(h, per_thread);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  CUresult r = submit(st, op);
  if (r != CUDA_SUCCESS || async || st->capture) return r;
  return synchronize_stream(st);
}

}  // namespace simgpu

using namespace simgpu;

namespace {
CUresult copy3d(const CUDA_MEMCPY3D* p, CUstream s, bool async, bool per_thread) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  Op op;
  CUresult r = copy3d_op(*p, &op);
  return r == CUDA_SUCCESS ? submit_copy(op, s, async, per_thread) : r;
}
CUresult copy2d(const CUDA_MEMCPY2D* p, CUstream s, bool async, bool per_thread) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D c = copy2d_as_3d(*p);
  return copy3d(&c, s, async, per_thread);
}
}  // namespace

SIM_API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* p) { return copy2d(p, nullptr, false, false); }
SIM_API CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* p) { return copy2d(p, nullptr, false, true); }
SIM_API CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* p) { return copy2d(p, nullptr, false, false); }
SIM_API CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* p) { return copy2d(p, nullptr, false, true); }
SIM_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* p, CUstream s) { return copy2d(p, s, true, false); }
SIM_API CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* p, CUstream s) { return copy2d(p, s, true, true); }
SIM_API CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D* p) { return copy3d(p, nullptr, false, false); }
SIM_API CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* p) { return copy3d(p, nullptr, false, true); }
SIM_API CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* p, CUstream s) { return copy3d(p, s, true, false); }
SIM_API CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* p, CUstream s) { return copy3d(p, s, true, true); }

// 2D memsets (cuMemsetD2D*): `height` rows of `width` elements, `pitch` bytes apart.
namespace {
CUresult set2d(CUdeviceptr dst, size_t pitch, uint32_t value, size_t elem, size_t width, size_t height, CUstream s,
               bool async, bool per_thread) {
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (!dst || (height > 1 && pitch < width * elem)) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = resolve_stream(s, per_thread);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  Op op;
  op.kind = Op::set;
  op.dst = reinterpret_cast<void*>(dst);
  op.value = value;
  op.elem = elem;
  op.count = width;
  op.height = height;
  op.dst_pitch = pitch;
  Context* c = current_context();
  op.launch.device = c ? c->device : 0;
  CUresult r = submit(st, op);
  if (r != CUDA_SUCCESS || async || st->capture) return r;
  return synchronize_stream(st);
}
}  // namespace

#define SET2D(name, type, elem)                                                                                  \
  SIM_API CUresult name(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h) {                               \
    return set2d(d, pitch, v, elem, w, h, nullptr, false, false);                                                \
  }                                                                                                              \
  SIM_API CUresult name##_ptds(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h) {                        \
    return set2d(d, pitch, v, elem, w, h, nullptr, false, true);                                                 \
  }
SET2D(cuMemsetD2D8_v2, unsigned char, 1)
SET2D(cuMemsetD2D16_v2, unsigned short, 2)
SET2D(cuMemsetD2D32_v2, unsigned int, 4)
#define SET2D_ASYNC(name, type, elem)                                                                            \
  SIM_API CUresult name(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h, CUstream s) {                   \
    return set2d(d, pitch, v, elem, w, h, s, true, false);                                                       \
  }                                                                                                              \
  SIM_API CUresult name##_ptsz(CUdeviceptr d, size_t pitch, type v, size_t w, size_t h, CUstream s) {            \
    return set2d(d, pitch, v, elem, w, h, s, true, true);                                                        \
  }
SET2D_ASYNC(cuMemsetD2D8Async, unsigned char, 1)
SET2D_ASYNC(cuMemsetD2D16Async, unsigned short, 2)
SET2D_ASYNC(cuMemsetD2D32Async, unsigned int, 4)
