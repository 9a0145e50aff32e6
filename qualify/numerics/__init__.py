"""The numerics of the fused cartridge kernel, one job per module.

cell              the fields of one matrix cell (`KernelNumericsParams`), below both the gate kind and the checks
inputs            cell -> seeded attention problem; boundary and sink emphasis; what is outside the contract
metrics           error measures of an output against a reference and the tolerance checks on them
oracle            the fp32 reference, an independent float64 attention and FlashInfer as a second oracle
fused             launching the kernel under test (device choice, NaN-poisoned output, source identity)
rejection         "the documented error was raised and names the broken field" as a check
kernel_check      check: kernel     -- the fused kernel against the oracles
contract_check    check: contract   -- one broken field per case must be rejected
reference_check   check: reference  -- the fp32 reference against float64 over the injection layout

``cartridge_attn`` is imported inside functions throughout: importing it imports triton, and the Triton
interpreter (``TRITON_INTERPRET=1``) must be chosen before triton's first import, which collecting gate
files must therefore never trigger. Looking it up at call time also lets tests substitute its functions.
"""
