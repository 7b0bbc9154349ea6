"""The catalog: GPUs (hardware.py, hardware_profiles/*.yaml), models and drafter kinds (models.py, models.yaml, drafters.yaml) as frozen specs."""
