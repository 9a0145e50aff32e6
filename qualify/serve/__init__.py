"""Serving cartridges in vLLM 0.26 through its public extension points.

Two modes for one cartridge per engine (see `config.ServingConfig`):

* ``inject`` (the ordinary path): prompts start with ``cartridge_len`` placeholder tokens; a KV connector
  (`connector.CartridgeInjectConnector`, registered by module path) reports them as already computed and copies
  the cartridge into each request's first pages, so nothing is prefilled over them. With vLLM's prefix cache on
  (the prefix-cached layouts), the cartridge's full blocks are written once and shared by every request.
* ``shared``: the cartridge lives once on the GPU outside the paged cache (K BF16, V FP8 E4M3 or BF16); the
  attention backend registered as ``CUSTOM`` (`backend.CartridgeAttentionBackend`) runs the fused
  ``cartridge_attn`` kernel over cartridge + live pages; prompts carry only the question, and the model
  (`model`, registered through vLLM's ModelRegistry) places them after the cartridge (each layer's rotary table
  starts at ``cartridge_len``, `rope_shift`), so the cartridge costs no pages per request. Both modes run in vLLM's
  default mode, torch.compile with CUDA graphs (the backend's graph rules: `backend`).

`plugin.register` is the ``vllm.general_plugins`` entry point. `config` (guards and engine arguments) and
`rope_shift` import no vLLM, so they are tested on CPU; the other modules import vLLM and run where it is installed.

This package sits below `qualify.perf`: perf measures serving layouts and engines from here, and nothing here
imports `qualify.perf`.
"""
