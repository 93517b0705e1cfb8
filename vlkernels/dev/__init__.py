"""Developer tooling (not imported by the runtime package): the static GPU profile behind ``vlkernels gpu-profile``."""
