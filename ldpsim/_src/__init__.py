"""ldpsim's implementation (private: import the public names from :mod:`ldpsim` and its
submodules :mod:`ldpsim.privacy`, :mod:`ldpsim.fl`, :mod:`ldpsim.data`, ...)."""
