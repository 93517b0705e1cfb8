#include "boxes/rle_poly.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/parallel.h"

namespace vlk {
namespace {

constexpr int64_t kScale = 5;

// C's (int) conversion as x86-64 executes it (cvttsd2si): truncation toward zero, and INT32_MIN for NaN or a value
// outside int32. pycocotools meets NaN for the 0/0 slope of a repeated vertex; here it is defined behaviour.
inline int64_t trunc_i32(double v) {
  if (!(v > -2147483649.0 && v < 2147483648.0)) return INT32_MIN;
  return static_cast<int64_t>(v);
}

// a * b rounded on its own before the addition that follows: a fused multiply-add (FMA targets contract a * b + c)
// rounds once and can move a value across the .5 that decides a pixel.
inline double mul(double a, double b) {
  volatile double p = a * b;
  return p;
}

// One polygon edge as pycocotools walks it: unit steps along the longer axis (major_x: x), the other coordinate
// rounded with (int)(start + slope * t + .5) from the end with the smaller major coordinate (the endpoints are
// swapped when the edge runs the other way, `flip`, and the walk then visits t = len .. 0).
struct Edge {
  int64_t xs, ys, len;
  double s;
  bool major_x, flip;

  Edge(int64_t x0, int64_t y0, int64_t x1, int64_t y1) {
    const int64_t dx = x1 > x0 ? x1 - x0 : x0 - x1, dy = y1 > y0 ? y1 - y0 : y0 - y1;
    major_x = dx >= dy;
    flip = major_x ? x0 > x1 : y0 > y1;
    if (flip) {
      std::swap(x0, x1);
      std::swap(y0, y1);
    }
    xs = x0;
    ys = y0;
    len = major_x ? dx : dy;
    // len == 0 (a repeated vertex): pycocotools divides 0 by 0.
    s = len == 0 ? std::nan("") : static_cast<double>(major_x ? y1 - y0 : x1 - x0) / static_cast<double>(len);
  }
  // Point d = 0 .. len in walk order.
  int64_t t_of(int64_t d) const { return flip ? len - d : d; }
  int64_t u(int64_t d) const {
    const int64_t t = t_of(d);
    return major_x ? t + xs : trunc_i32(static_cast<double>(xs) + mul(s, static_cast<double>(t)) + .5);
  }
  int64_t v(int64_t d) const {
    const int64_t t = t_of(d);
    return major_x ? trunc_i32(static_cast<double>(ys) + mul(s, static_cast<double>(t)) + .5) : t + ys;
  }
};

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

struct Raster {
  int64_t h, w;
  std::vector<int64_t>& pos;

  // Row of a boundary whose walk pair has lower upsampled y `yd`: pycocotools' ceil((yd + .5) / 5 - .5) clamped
  // to [0, h], in the same double arithmetic.
  int64_t row(int64_t yd) const {
    double y = (static_cast<double>(yd) + .5) / kScale - .5;
    if (y < 0) y = 0;
    else if (y > static_cast<double>(h)) y = static_cast<double>(h);
    return static_cast<int64_t>(std::ceil(y));
  }
  void add(int64_t col, int64_t yd) { pos.push_back(col * h + row(yd)); }

  // A step from upsampled column pu to nu (pu != nu) with lower y yd: a boundary when the step's column
  // (nu < pu ? nu : nu - 1) is a pixel centre line 5c + 2 with c in [0, w).
  void step(int64_t pu, int64_t nu, int64_t yd) {
    const int64_t xd = nu < pu ? nu : nu - 1;
    if (xd < 2 || (xd - 2) % kScale != 0 || (xd - 2) / kScale >= w) return;
    add((xd - 2) / kScale, yd);
  }

  // The steps inside one edge that cross a centre line. The upsampled column u(d) is monotone in d, so a centre
  // line X is crossed (at most once) by the first step reaching X + 1 (increasing) or X (decreasing); that step is
  // found from the line's equation and then corrected by exact evaluation (the rounding decides, not the guess).
  void edge(const Edge& e) {
    const int64_t u0 = e.u(0), u1 = e.u(e.len);
    if (u0 == u1 || w <= 0) return;
    const bool inc = u1 > u0;
    const int64_t lo = inc ? u0 : u1, hi = (inc ? u1 : u0) - 1;  // centre lines X in [lo, hi] can be crossed
    const int64_t c0 = std::max<int64_t>(0, floor_div(lo - 2 + kScale - 1, kScale));
    const int64_t c1 = std::min<int64_t>(w - 1, floor_div(hi - 2, kScale));
    for (int64_t c = c0; c <= c1; ++c) {
      const int64_t X = kScale * c + 2;
      auto reached = [&](int64_t d) { return inc ? e.u(d) >= X + 1 : e.u(d) <= X; };
      // Where the rounded coordinate passes X + .5: t = X + .5 - xs along x, (X + .5 - xs) / s across.
      const double t = e.major_x ? static_cast<double>(X - e.xs) + .5 : (static_cast<double>(X - e.xs) + .5) / e.s;
      double g = e.flip ? static_cast<double>(e.len) - t : t;
      g = std::min(std::max(std::round(g), 1.0), static_cast<double>(e.len));
      int64_t d = static_cast<int64_t>(g);
      while (d > 1 && reached(d - 1)) --d;
      while (d < e.len && !reached(d)) ++d;
      if (e.u(d) != (inc ? X + 1 : X)) continue;  // the walk jumps over this centre line
      add(c, std::min(e.v(d - 1), e.v(d)));
    }
  }
};

// Parity of boundaries per pixel (pycocotools' merge of zero-length runs), then runs ending at h * w.
void runs_from_boundaries(std::vector<int64_t>& pos, int64_t hw, std::vector<int64_t>& runs) {
  std::sort(pos.begin(), pos.end());
  int64_t prev = 0;
  for (size_t i = 0; i < pos.size();) {
    size_t j = i;
    while (j < pos.size() && pos[j] == pos[i]) ++j;
    if (((j - i) & 1) && pos[i] < hw) {
      runs.push_back(pos[i] - prev);
      prev = pos[i];
    }
    i = j;
  }
  runs.push_back(hw - prev);
}

constexpr const char* kSizeError = "h and w must be non-negative with h*w < 2**32";
bool size_ok(int64_t h, int64_t w) { return h >= 0 && w >= 0 && (w == 0 || h <= int64_t{0xFFFFFFFF} / w); }

std::string check_coord(double v, int64_t p, int64_t j, const char* what) {
  if (std::isfinite(v) && std::fabs(v) <= kMaxPolyCoord) return {};
  return std::string(what) + " " + std::to_string(p) + ": coordinate " + std::to_string(j) + " is " +
         std::to_string(v) + "; coordinates must be finite and within +-1e8 pixels";
}

// One polygon of k vertices -> runs (appended).
void rasterize(const double* xy, int64_t k, int64_t h, int64_t w, std::vector<int64_t>& pos,
               std::vector<int64_t>& runs) {
  pos.clear();
  Raster r{h, w, pos};
  std::vector<int64_t> X(static_cast<size_t>(k)), Y(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) {
    X[j] = trunc_i32(mul(kScale, xy[2 * j]) + .5);
    Y[j] = trunc_i32(mul(kScale, xy[2 * j + 1]) + .5);
  }
  for (int64_t j = 0; j < k; ++j) {
    const int64_t n = j + 1 == k ? 0 : j + 1;
    const Edge e(X[j], Y[j], X[n], Y[n]);
    if (j > 0) {
      // The walk's step from the previous edge's last point to this edge's first (distinct for negative
      // coordinates, where (int)(v + .5) does not round to nearest).
      const Edge p(X[j - 1], Y[j - 1], X[j], Y[j]);
      const int64_t pu = p.u(p.len), nu = e.u(0);
      if (pu != nu) r.step(pu, nu, std::min(p.v(p.len), e.v(0)));
    }
    r.edge(e);
  }
  runs_from_boundaries(pos, h * w, runs);
}

// Rasterizes n polygons given by a vertex getter into CSR runs, in parallel.
template <typename Vertices>
void rasterize_all(int64_t n, int64_t h, int64_t w, Vertices vertices, std::vector<int64_t>& runs,
                   std::vector<int64_t>& run_off) {
  std::vector<std::vector<int64_t>> per(static_cast<size_t>(n));
  parallel_for(n, 16, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> pos;
    std::vector<double> buf;
    for (int64_t p = begin; p < end; ++p) {
      int64_t k = 0;
      const double* xy = vertices(p, buf, &k);
      rasterize(xy, k, h, w, pos, per[p]);
    }
  });
  run_off.assign(static_cast<size_t>(n) + 1, 0);
  for (int64_t p = 0; p < n; ++p) run_off[p + 1] = run_off[p] + static_cast<int64_t>(per[p].size());
  runs.resize(static_cast<size_t>(run_off[n]));
  for (int64_t p = 0; p < n; ++p) std::copy(per[p].begin(), per[p].end(), runs.begin() + run_off[p]);
}

}  // namespace

std::string rle_from_polygons(const double* xy, const int64_t* off, int64_t n, int64_t h, int64_t w,
                              std::vector<int64_t>& runs, std::vector<int64_t>& run_off) {
  if (!size_ok(h, w)) return kSizeError;
  for (int64_t p = 0; p < n; ++p) {
    if (off[p + 1] < off[p]) return "polygon offsets must be non-decreasing";
    for (int64_t j = 2 * off[p]; j < 2 * off[p + 1]; ++j) {
      std::string e = check_coord(xy[j], p, j - 2 * off[p], "polygon");
      if (!e.empty()) return e;
    }
  }
  rasterize_all(
      n, h, w,
      [&](int64_t p, std::vector<double>&, int64_t* k) {
        *k = off[p + 1] - off[p];
        return xy + 2 * off[p];
      },
      runs, run_off);
  return {};
}

std::string rle_from_bboxes(const double* boxes, int64_t n, int64_t h, int64_t w, std::vector<int64_t>& runs,
                            std::vector<int64_t>& run_off) {
  if (!size_ok(h, w)) return kSizeError;
  for (int64_t p = 0; p < n; ++p) {
    const double* b = boxes + 4 * p;
    const double c[4] = {b[0], b[1], b[0] + b[2], b[1] + b[3]};
    for (int j = 0; j < 4; ++j) {
      std::string e = check_coord(c[j], p, j, "box");
      if (!e.empty()) return e;
    }
  }
  rasterize_all(
      n, h, w,
      [&](int64_t p, std::vector<double>& buf, int64_t* k) {
        const double* b = boxes + 4 * p;
        const double xs = b[0], xe = xs + b[2], ys = b[1], ye = ys + b[3];
        buf.assign({xs, ys, xs, ye, xe, ye, xe, ys});
        *k = 4;
        return static_cast<const double*>(buf.data());
      },
      runs, run_off);
  return {};
}

}  // namespace vlk
