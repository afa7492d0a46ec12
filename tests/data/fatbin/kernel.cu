// The smallest kernel that gives nvcc something to embed: tests/test_facts_fatbin.py compiles it
// for chosen -gencode targets and checks that mmstack.fatbin lists exactly those.
__global__ void add(float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] += b[i];
}

extern "C" void launch_add(float* a, const float* b, int n) { add<<<(n + 255) / 256, 256>>>(a, b, n); }
