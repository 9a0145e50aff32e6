"""Serving cartridges in vLLM 0.26 through its public extension points.

Two modes for one cartridge per engine (see `config.ServingConfig`):

* ``inject`` (the ordinary path): prompts start with ``cartridge_len`` placeholder tokens; a KV connector
  (`connector.CartridgeInjectConnector`, registered by module path) reports them as already computed and copies
  the cartridge into each request's first pages, so nothing is prefilled over them.
* ``shared``: the cartridge lives once on the GPU outside the paged cache (K BF16, V FP8 E4M3 or BF16); the
  attention backend registered as ``CUSTOM`` (`backend.CartridgeAttentionBackend`) runs the fused
  ``cartridge_attn`` kernel over cartridge + live pages; prompts carry only the question, and the model
  (`model`, registered through vLLM's ModelRegistry) places them after the cartridge (positions offset by
  ``cartridge_len``), so the cartridge costs no pages per request.

`plugin.register` is the ``vllm.general_plugins`` entry point. `config` (guards and engine arguments) imports
no vLLM, so it is tested on CPU; the other modules import vLLM and run where it is installed.

This package sits below `qualify.perf`: perf measures serving layouts and engines from here, and nothing here
imports `qualify.perf`.
"""
