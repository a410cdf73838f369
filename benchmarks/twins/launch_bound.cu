// CUDA C twins of benchmarks/bench_launch_bound.py's programs, launch for launch:
//   launch_bound wavefront N DIR | bfs NODES DIR | gaussian N DIR
// Each reads its inputs from DIR (raw little-endian files the Python side wrote), runs
// the same host loop as the kiln version RUNS times, prints the median wall time of the
// loop in ms (host clock around the loop, the device synchronised before and after) and
// writes its result into DIR for the Python side to compare.
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

static const int RUNS = 7;

template <typename T> std::vector<T> load(const std::string &path, size_t count) {
    std::vector<T> v(count);
    FILE *f = fopen(path.c_str(), "rb");
    if (!f || fread(v.data(), sizeof(T), count, f) != count) { perror(path.c_str()); exit(1); }
    fclose(f);
    return v;
}

template <typename T> void save(const std::string &path, const std::vector<T> &v) {
    FILE *f = fopen(path.c_str(), "wb");
    fwrite(v.data(), sizeof(T), v.size(), f);
    fclose(f);
}

template <typename F> double median_ms(F run) {
    std::vector<double> times;
    for (int r = 0; r < RUNS + 1; r++) {
        CHECK(cudaDeviceSynchronize());
        auto t0 = std::chrono::steady_clock::now();
        run();
        CHECK(cudaDeviceSynchronize());
        auto t1 = std::chrono::steady_clock::now();
        if (r) times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

// ------------------------------------------------------------------ wavefront
__global__ void nw_diagonal(int *score, const int *ref, int d, int n, int penalty) {
    int first = max(1, d - n);
    int i = first + blockIdx.x * blockDim.x + threadIdx.x;
    int j = d - i;
    if (i <= min(n, d - 1) && j >= 1) {
        int w = n + 1;
        int best = score[(i - 1) * w + j - 1] + ref[i * w + j];
        best = max(best, score[(i - 1) * w + j] - penalty);
        best = max(best, score[i * w + j - 1] - penalty);
        score[i * w + j] = best;
    }
}

static void wavefront(int n, const std::string &dir) {
    size_t cells = size_t(n + 1) * (n + 1);
    auto ref = load<int>(dir + "/ref.bin", cells);
    auto init = load<int>(dir + "/score.bin", cells);
    int *dref, *dscore;
    CHECK(cudaMalloc(&dref, cells * 4)); CHECK(cudaMalloc(&dscore, cells * 4));
    CHECK(cudaMemcpy(dref, ref.data(), cells * 4, cudaMemcpyHostToDevice));
    double ms = median_ms([&] {
        CHECK(cudaMemcpy(dscore, init.data(), cells * 4, cudaMemcpyHostToDevice));
        for (int d = 2; d <= 2 * n; d++) {
            int len = std::min(n, d - 1) - std::max(1, d - n) + 1;
            nw_diagonal<<<(len + 255) / 256, 256>>>(dscore, dref, d, n, 10);
        }
    });
    std::vector<int> out(cells);
    CHECK(cudaMemcpy(out.data(), dscore, cells * 4, cudaMemcpyDeviceToHost));
    save(dir + "/out.bin", out);
    printf("%.4f\n", ms);
}

// ------------------------------------------------------------------ bfs
__global__ void bfs_expand(const int *starts, const int *edges, int *frontier, int *next,
                           const int *visited, int *cost, int nodes) {
    int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v < nodes && frontier[v]) {
        frontier[v] = 0;
        for (int e = starts[v]; e < starts[v + 1]; e++) {
            int u = edges[e];
            if (!visited[u]) { cost[u] = cost[v] + 1; next[u] = 1; }
        }
    }
}

__global__ void bfs_commit(int *frontier, int *next, int *visited, int *more, int nodes) {
    int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v < nodes && next[v]) {
        frontier[v] = 1; visited[v] = 1; next[v] = 0; *more = 1;
    }
}

static void bfs(int nodes, const std::string &dir) {
    auto starts = load<int>(dir + "/starts.bin", nodes + 1);
    int nedges = starts[nodes];
    auto edges = load<int>(dir + "/edges.bin", nedges);
    int *dstarts, *dedges, *dfrontier, *dnext, *dvisited, *dcost, *dmore;
    CHECK(cudaMalloc(&dstarts, (nodes + 1) * 4)); CHECK(cudaMalloc(&dedges, nedges * 4));
    for (int **p : {&dfrontier, &dnext, &dvisited, &dcost}) CHECK(cudaMalloc(p, nodes * 4));
    CHECK(cudaMalloc(&dmore, 4));
    CHECK(cudaMemcpy(dstarts, starts.data(), (nodes + 1) * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dedges, edges.data(), nedges * 4, cudaMemcpyHostToDevice));
    std::vector<int> cost0(nodes, -1), first(nodes, 0), none(nodes, 0);
    cost0[0] = 0;
    first[0] = 1;
    int blocks = (nodes + 255) / 256, levels = 0;
    double ms = median_ms([&] {  // the same four copies as the kiln version
        CHECK(cudaMemcpy(dcost, cost0.data(), nodes * 4, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dfrontier, first.data(), nodes * 4, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dvisited, first.data(), nodes * 4, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dnext, none.data(), nodes * 4, cudaMemcpyHostToDevice));
        int more = 1;
        levels = 0;
        while (more) {
            more = 0;
            CHECK(cudaMemcpy(dmore, &more, 4, cudaMemcpyHostToDevice));
            bfs_expand<<<blocks, 256>>>(dstarts, dedges, dfrontier, dnext, dvisited, dcost, nodes);
            bfs_commit<<<blocks, 256>>>(dfrontier, dnext, dvisited, dmore, nodes);
            CHECK(cudaMemcpy(&more, dmore, 4, cudaMemcpyDeviceToHost));
            levels++;
        }
    });
    std::vector<int> out(nodes);
    CHECK(cudaMemcpy(out.data(), dcost, nodes * 4, cudaMemcpyDeviceToHost));
    save(dir + "/out.bin", out);
    printf("%.4f\n", ms);
}

// ------------------------------------------------------------------ gaussian
__global__ void fan1(const float *a, float *m, int n, int t) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n - 1 - t) m[(i + t + 1) * n + t] = a[(i + t + 1) * n + t] / a[t * n + t];
}

__global__ void fan2(float *a, float *b, const float *m, int n, int t) {
    int i = blockIdx.y * blockDim.y + threadIdx.y;  // row below t
    int j = blockIdx.x * blockDim.x + threadIdx.x;  // column from t
    if (i < n - 1 - t && j < n - t) {
        int row = i + 1 + t, col = j + t;
        a[row * n + col] -= m[row * n + t] * a[t * n + col];
        if (j == 0) b[row] -= m[row * n + t] * b[t];
    }
}

static void gaussian(int n, const std::string &dir) {
    auto a0 = load<float>(dir + "/a.bin", size_t(n) * n);
    auto b0 = load<float>(dir + "/b.bin", n);
    float *da, *db, *dm;
    CHECK(cudaMalloc(&da, size_t(n) * n * 4)); CHECK(cudaMalloc(&db, n * 4));
    CHECK(cudaMalloc(&dm, size_t(n) * n * 4));
    double ms = median_ms([&] {
        CHECK(cudaMemcpy(da, a0.data(), size_t(n) * n * 4, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(db, b0.data(), n * 4, cudaMemcpyHostToDevice));
        CHECK(cudaMemset(dm, 0, size_t(n) * n * 4));
        for (int t = 0; t < n - 1; t++) {
            fan1<<<(n - 1 - t + 255) / 256, 256>>>(da, dm, n, t);
            dim3 grid((n - t + 15) / 16, (n - 1 - t + 15) / 16);
            fan2<<<grid, dim3(16, 16)>>>(da, db, dm, n, t);
        }
    });
    std::vector<float> out(size_t(n) * n + n);
    CHECK(cudaMemcpy(out.data(), da, size_t(n) * n * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(out.data() + size_t(n) * n, db, n * 4, cudaMemcpyDeviceToHost));
    save(dir + "/out.bin", out);
    printf("%.4f\n", ms);
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: %s PROGRAM SIZE DIR\n", argv[0]); return 2; }
    std::string program = argv[1], dir = argv[3];
    int size = atoi(argv[2]);
    if (program == "wavefront") wavefront(size, dir);
    else if (program == "bfs") bfs(size, dir);
    else if (program == "gaussian") gaussian(size, dir);
    else { fprintf(stderr, "unknown program %s\n", argv[1]); return 2; }
    return 0;
}
