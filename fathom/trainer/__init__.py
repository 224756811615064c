"""Training: TRL 1.15's AsyncGRPOTrainer with PEFT LoRA, merged-weight sync to vLLM, callbacks.

`fathom.trainer.build.build_trainer` wires a run; `cpu_compat` makes TRL run without CUDA.
"""
