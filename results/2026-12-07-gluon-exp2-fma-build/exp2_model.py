"""The FMA-pipe exponential of the patches, fitted and modelled in NumPy (run with any NumPy).

Fits 1 + c1 f + c2 f^2 + c3 f^3 ~ 2^f on [0, 1] for the least maximum relative error (Lawson's iteratively
reweighted least squares), prints the coefficients as the PTX's FP32 bit patterns, then runs the PTX sequence on
FP32 inputs and compares it with 2^x in float64 and with what the flush-to-zero MUFU gives (0 below 2^-126).
The model is exact but for the FMAs: each is the exact product plus the addend rounded to float64, then to FP32,
a double rounding that may differ from the PTX's single one in the last bit.
"""

import numpy as np


def fit() -> np.ndarray:
    f = np.linspace(0.0, 1.0, 20001)
    t = 2.0**f
    a = np.stack([f, f**2, f**3], 1) / t[:, None]
    b = (t - 1) / t
    w = np.full_like(f, 1 / len(f))
    for _ in range(3000):
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(a * sw[:, None], b * sw, rcond=None)
        w = w * np.abs(a @ c - b)
        w /= w.sum()
    return c.astype(np.float32)


def bits(v: float) -> str:
    return f"0f{np.float32(v).view(np.uint32):08X}"


def poly_exp2(x: np.ndarray, c1: np.float32, c2: np.float32, c3: np.float32) -> np.ndarray:
    """max.NaN, add.rm with 1.5 * 2^23 + 127, floor and fraction, Horner, the scale from the sum's low bits, mul."""
    magic = np.float32(12583039.0)  # 0f4B40007F
    with np.errstate(invalid="ignore"):
        xc = np.where(np.isnan(x), x, np.maximum(x, np.float32(-127.0)))
        # add.rm: the sum rounded down to the FP32 grid, whose spacing is 1 between 2^23 and 2^24, is the magic
        # number plus floor(x), exactly (rounding the sum to nearest first would lose x in (-2^-30, 0))
        t = (np.floor(xc) + magic).astype(np.float32)
        k = t - magic
        f = xc - k

        def fma(a: np.ndarray, b: np.ndarray, c: np.float32) -> np.ndarray:
            return (a.astype(np.float64) * b.astype(np.float64) + np.float64(c)).astype(np.float32)

        p = fma(f, np.float32(c3), c2)
        p = fma(p, f, c1)
        p = fma(p, f, np.float32(1.0))
        scale = (t.view(np.uint32) << np.uint32(23)).view(np.float32)
        return (p * scale).astype(np.float32)


def main() -> None:
    c1, c2, c3 = fit()
    print("c1 c2 c3:", c1, c2, c3, "as PTX:", bits(c1), bits(c2), bits(c3), "p(1):", 1 + c1 + c2 + c3)
    x = np.linspace(-130, 0, 2_000_001, dtype=np.float32)
    y = poly_exp2(x, c1, c2, c3)
    ref = np.exp2(x.astype(np.float64))
    normal = ref >= 2.0**-126
    print("max relative error where 2^x >= 2^-126:", np.max(np.abs(y[normal] / ref[normal] - 1)))
    print("largest result where 2^x < 2^-126 (the MUFU gives 0):", y[~normal].max())
    special = np.float32([-np.inf, -1e30, -127.0, -126.5, -126.0, -0.0, 0.0, np.nan])
    for v, r in zip(special, poly_exp2(special, c1, c2, c3), strict=True):
        print(f"  2^{v} -> {r!r}")


if __name__ == "__main__":
    main()
