"""Eval-set loading and loss evaluation of a model behind a cartridge."""
