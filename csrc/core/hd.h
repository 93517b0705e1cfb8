// VLK_HD marks a function shared by a CPU kernel and its CUDA twin: host + device (inlined) under nvcc, a plain
// inline function in the C++ build. One definition for every header of such functions.
#pragma once

#ifdef __CUDACC__
#define VLK_HD __host__ __device__ __forceinline__
#else
#define VLK_HD inline
#endif
