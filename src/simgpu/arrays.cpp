// CUDA arrays (cuArrayCreate, cuArray3DCreate, cudaMallocArray): on a GPU an opaque, tiled
// layout that only copies and textures reach. Kernels do not run here and textures are not
// simulated, so an array is plain device memory laid out row by row (pitch = width x element
// size, `height` rows per slice) and copies to and from it (cuMemcpy2D/3D with array operands,
// pitched_copies.cpp; cuMemcpy[HtoA|AtoH|DtoA|AtoD|AtoA] at a byte offset) move real bytes.
// Its memory counts as device memory, as on a GPU. Not simulated: sparse and deferred-mapping
// arrays, mipmaps, planes of multi-planar formats, block-compressed formats
// (CUDA_ERROR_NOT_SUPPORTED).
#include "sim.h"

namespace simgpu {

namespace {

struct Array {
  uint32_t magic = 0x41525259;  // "ARRY"
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  CUdeviceptr mem = 0;
  size_t pitch = 0, height = 0, bytes = 0;
};

Array* as_array(CUarray a) {
  auto* p = reinterpret_cast<Array*>(a);
  return p && p->magic == 0x41525259 ? p : nullptr;
}

// Bytes of one channel, 0 for a format the simulator does not lay out.
size_t channel_bytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
  }
}

CUresult create(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR& d) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (d.NumChannels != 1 && d.NumChannels != 2 && d.NumChannels != 4) return CUDA_ERROR_INVALID_VALUE;
  size_t elem = channel_bytes(d.Format);
  if (!elem) return CUDA_ERROR_NOT_SUPPORTED;
  if (d.Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) return CUDA_ERROR_NOT_SUPPORTED;
  // cuda.h: a 1D array has Height 0, a 2D one Depth 0; a 3D array needs a Height.
  if (d.Width == 0 || (d.Depth && !d.Height && !(d.Flags & CUDA_ARRAY3D_LAYERED))) return CUDA_ERROR_INVALID_VALUE;
  auto* a = new Array();
  a->desc = d;
  a->pitch = d.Width * elem * d.NumChannels;
  a->height = d.Height ? d.Height : 1;
  a->bytes = a->pitch * a->height * (d.Depth ? d.Depth : 1);
  CUresult r = allocate_device(&a->mem, a->bytes, "cuArrayCreate");
  if (r != CUDA_SUCCESS) {
    delete a;
    return r;
  }
  *out = reinterpret_cast<CUarray>(a);
  return CUDA_SUCCESS;
}

// A byte range of a linear (offset-addressed) array copy.
CUresult at_offset(CUarray h, size_t offset, size_t bytes, unsigned char** p) {
  Array* a = as_array(h);
  if (!a) return CUDA_ERROR_INVALID_HANDLE;
  if (offset > a->bytes || bytes > a->bytes - offset) return CUDA_ERROR_INVALID_VALUE;
  *p = reinterpret_cast<unsigned char*>(a->mem) + offset;
  return CUDA_SUCCESS;
}

CUresult linear_copy(void* dst, const void* src, size_t bytes, CUstream s, bool async, bool per_thread) {
  if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
  Op op;
  op.kind = Op::copy;
  op.dst = dst;
  op.src = src;
  op.bytes = bytes;
  return submit_copy(op, s, async, per_thread);
}

}  // namespace

bool array_memory(CUarray h, unsigned char** base, size_t* pitch, size_t* height, size_t* bytes) {
  Array* a = as_array(h);
  if (!a) return false;
  *base = reinterpret_cast<unsigned char*>(a->mem);
  *pitch = a->pitch;
  *height = a->height;
  *bytes = a->bytes;
  return true;
}

}  // namespace simgpu

using namespace simgpu;

SIM_API CUresult cuArrayCreate_v2(CUarray* out, const CUDA_ARRAY_DESCRIPTOR* d) {
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = d->Width, d3.Height = d->Height, d3.Format = d->Format, d3.NumChannels = d->NumChannels;
  return create(out, d3);
}
SIM_API CUresult cuArray3DCreate_v2(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  return d ? create(out, *d) : CUDA_ERROR_INVALID_VALUE;
}
SIM_API CUresult cuArrayDestroy(CUarray h) {
  Array* a = as_array(h);
  if (!a) return CUDA_ERROR_INVALID_HANDLE;
  synchronize_all();  // like cuMemFree: copies queued on it finish first
  release_device(a->mem);
  a->magic = 0;
  delete a;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* d, CUarray h) {
  Array* a = as_array(h);
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  if (!a) return CUDA_ERROR_INVALID_HANDLE;
  *d = a->desc;
  return CUDA_SUCCESS;
}
// cuda.h: only for 1D and 2D arrays.
SIM_API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* d, CUarray h) {
  Array* a = as_array(h);
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  if (!a) return CUDA_ERROR_INVALID_HANDLE;
  if (a->desc.Depth) return CUDA_ERROR_INVALID_VALUE;
  d->Width = a->desc.Width, d->Height = a->desc.Height, d->Format = a->desc.Format, d->NumChannels = a->desc.NumChannels;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* req, CUarray h, CUdevice dev) {
  Array* a = as_array(h);
  if (!req || !valid_device(dev)) return CUDA_ERROR_INVALID_VALUE;
  if (!a) return CUDA_ERROR_INVALID_HANDLE;
  *req = CUDA_ARRAY_MEMORY_REQUIREMENTS{};
  req->size = a->bytes;
  req->alignment = 512;
  return CUDA_SUCCESS;
}

// Offset copies: the array's bytes in their row-major order.
#define ARRAY_COPY_PAIR(name, params, ...)                                             \
  SIM_API CUresult name params {                                                       \
    [[maybe_unused]] const bool per_thread = false;                                   \
    __VA_ARGS__                                                                        \
  }                                                                                    \
  SIM_API CUresult name##_ptds params {                                                \
    [[maybe_unused]] const bool per_thread = true;                                    \
    __VA_ARGS__                                                                        \
  }
ARRAY_COPY_PAIR(cuMemcpyHtoA_v2, (CUarray dst, size_t off, const void* src, size_t n), {
  unsigned char* p;
  CUresult r = at_offset(dst, off, n, &p);
  return r == CUDA_SUCCESS ? linear_copy(p, src, n, nullptr, false, per_thread) : r;
})
ARRAY_COPY_PAIR(cuMemcpyAtoH_v2, (void* dst, CUarray src, size_t off, size_t n), {
  unsigned char* p;
  CUresult r = at_offset(src, off, n, &p);
  return r == CUDA_SUCCESS ? linear_copy(dst, p, n, nullptr, false, per_thread) : r;
})
ARRAY_COPY_PAIR(cuMemcpyDtoA_v2, (CUarray dst, size_t off, CUdeviceptr src, size_t n), {
  unsigned char* p;
  CUresult r = at_offset(dst, off, n, &p);
  return r == CUDA_SUCCESS ? linear_copy(p, reinterpret_cast<const void*>(src), n, nullptr, false, per_thread) : r;
})
ARRAY_COPY_PAIR(cuMemcpyAtoD_v2, (CUdeviceptr dst, CUarray src, size_t off, size_t n), {
  unsigned char* p;
  CUresult r = at_offset(src, off, n, &p);
  return r == CUDA_SUCCESS ? linear_copy(reinterpret_cast<void*>(dst), p, n, nullptr, false, per_thread) : r;
})
ARRAY_COPY_PAIR(cuMemcpyAtoA_v2, (CUarray dst, size_t doff, CUarray src, size_t soff, size_t n), {
  unsigned char *d, *s;
  CUresult r = at_offset(dst, doff, n, &d);
  if (r == CUDA_SUCCESS) r = at_offset(src, soff, n, &s);
  return r == CUDA_SUCCESS ? linear_copy(d, s, n, nullptr, false, per_thread) : r;
})
#define ARRAY_ASYNC_PAIR(name, params, ...)                                            \
  SIM_API CUresult name params {                                                       \
    [[maybe_unused]] const bool per_thread = false;                                   \
    __VA_ARGS__                                                                        \
  }                                                                                    \
  SIM_API CUresult name##_ptsz params {                                                \
    [[maybe_unused]] const bool per_thread = true;                                    \
    __VA_ARGS__                                                                        \
  }
ARRAY_ASYNC_PAIR(cuMemcpyHtoAAsync_v2, (CUarray dst, size_t off, const void* src, size_t n, CUstream s), {
  unsigned char* p;
  CUresult r = at_offset(dst, off, n, &p);
  return r == CUDA_SUCCESS ? linear_copy(p, src, n, s, true, per_thread) : r;
})
ARRAY_ASYNC_PAIR(cuMemcpyAtoHAsync_v2, (void* dst, CUarray src, size_t off, size_t n, CUstream s), {
  unsigned char* p;
  CUresult r = at_offset(src, off, n, &p);
  return r == CUDA_SUCCESS ? linear_copy(dst, p, n, s, true, per_thread) : r;
})
