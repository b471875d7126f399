# `make local` passes this file to llama-cpp-python's build as CMAKE_PROJECT_INCLUDE: CMake runs it after each
# project() call. llama-cpp-python forces LLAMA_BUILD_COMMON on (the llama.cpp helpers: argument parsing, chat
# parsers, downloads, an HTTP client), but its Python package loads none of it: only libllama and libggml.
# Turned off again when llama.cpp's own project() starts, the build compiles 74 objects instead of 178 (with
# -DLLAVA_BUILD=OFF, which drops the multimodal library; llama-cpp-python imports it only for image chat formats).
if(PROJECT_NAME STREQUAL "llama.cpp")
    set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp common library: not loaded by llama-cpp-python" FORCE)
endif()
