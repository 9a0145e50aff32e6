"""FP8 fake quantization and the KV layouts it is applied to."""
