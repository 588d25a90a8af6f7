# Cross-compiling molt for arm64 (phones, Apple-silicon and Snapdragon laptops) on a Debian
# amd64 machine with multiarch: GCC's aarch64 cross compiler, the :arm64 -dev packages
# (scripts/install-deps.sh arm64), and qemu-user to run what was built (tests, gtest discovery).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Debian's multiarch layout: libraries in /usr/lib/aarch64-linux-gnu, arch-specific headers in
# /usr/include/aarch64-linux-gnu, the rest shared with the host.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# pkg-config reads the arm64 .pc files only.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
# The arm64 loader and libraries are installed in the root (libc6:arm64), so qemu needs no -L.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static)
