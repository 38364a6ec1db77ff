// exp and log1p in double precision (GLSL has no double transcendentals), for the kernels that must reproduce
// the CPU's double-precision std::exp / std::log1p (router scores, mHC sigmoid and Sinkhorn softmax). Only
// included when ACC_DOUBLE (shaderFloat64). Accuracy: a few ulp of double, so a result rounded to f32 equals the
// CPU's except when the exact value lies within ~1e-15 (relative) of an f32 rounding boundary.
// Method (the classic one, e.g. fdlibm's e_exp.c / e_log.c): exp by x = n·ln2 + r, |r| ≤ ln2/2, with ln2 split
// into a high part with trailing zero bits (n·LN2_HI exact) and a low part, then a Taylor polynomial of e^r;
// log by u = m·2^e, m in [√½, √2), log m = 2·atanh(s), s = (m−1)/(m+1), an odd series in s.
// Subnormal double results (x < −708) may be flushed to 0 by the device. Every intermediate is `precise`: the
// compilers' algebraic simplifications (e.g. (1 + y) − 1 → y, which NIR applies to inexact math) would undo
// the error compensation.

// Constants by their bits (no decimal literal parsing involved; folded by the optimiser).
#define F64_LN2_HI packDouble2x32(uvec2(0xFEE00000u, 0x3FE62E42u))     // 6.93147180369123816490e-01
#define F64_LN2_LO packDouble2x32(uvec2(0x35793C76u, 0x3DEA39EFu))     // 1.90821492927058770002e-10
#define F64_INV_LN2 packDouble2x32(uvec2(0x652B82FEu, 0x3FF71547u))    // 1.44269504088896338700e+00
#define F64_SQRT_HALF packDouble2x32(uvec2(0x667F3BCDu, 0x3FE6A09Eu))  // sqrt(0.5)

double exp_f64(double x) {
  if (x > 709.78LF) return double(F32_INF);
  if (x < -745.2LF) return 0.0LF;
  precise const double n = floor(x * F64_INV_LN2 + 0.5LF);
  precise const double r = (x - n * F64_LN2_HI) - n * F64_LN2_LO;
  // e^r = Σ r^k / k!, k ≤ 13 (|r| ≤ 0.347: the first omitted term is < 5e-18), Horner in the nested form
  precise double p = 1.0LF;
  for (int k = 13; k >= 1; --k) p = 1.0LF + p * r / double(k);
  return ldexp(p, int(n));
}

// log(u) for finite u > 0
double log_f64(double u) {
  int e;
  precise double m = frexp(u, e);  // u = m·2^e, m in [0.5, 1)
  if (m < F64_SQRT_HALF) {
    m *= 2.0LF;
    e -= 1;
  }
  precise const double f = m - 1.0LF, s = f / (2.0LF + f), z = s * s;
  // 2·atanh(s) = 2s + 2s³/3 + 2s⁵/5 + …; |s| ≤ 0.172, terms through s^23
  precise double t = 0.0LF;
  for (int k = 11; k >= 1; --k) t = 2.0LF / double(2 * k + 1) + z * t;
  precise const double lm = 2.0LF * s + s * z * t;
  precise const double r = double(e) * F64_LN2_HI + (lm + double(e) * F64_LN2_LO);
  return r;
}

// log(1 + y) for y ≥ 0, accurate for tiny y (u = 1 + y rounded; the factor y / (u − 1) corrects the rounding)
double log1p_f64(double y) {
  precise const double u = 1.0LF + y;
  if (u == 1.0LF) return y;
  precise const double r = log_f64(u) * (y / (u - 1.0LF));
  return r;
}
