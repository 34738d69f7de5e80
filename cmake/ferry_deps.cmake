# Every dependency is a Debian package (scripts/install-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(GTest REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(Protobuf REQUIRED)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# ICU: Unicode NFC normalization for tokenizers whose tokenizer.json asks for it (Qwen).
pkg_check_modules(ICU REQUIRED IMPORTED_TARGET icu-uc)

# CAF 0.17.6 ships no CMake config and no pkg-config file.
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
find_library(CAF_IO_LIBRARY caf_io REQUIRED)
add_library(ferry_caf INTERFACE)
target_include_directories(ferry_caf SYSTEM INTERFACE ${CAF_INCLUDE_DIR})
target_link_libraries(ferry_caf INTERFACE ${CAF_CORE_LIBRARY} Threads::Threads)

# RESTinio (header-only) with its Debian dependencies.
find_path(RESTINIO_INCLUDE_DIR restinio/all.hpp)
find_path(HTTP_PARSER_INCLUDE_DIR http_parser.h)
find_library(HTTP_PARSER_LIBRARY http_parser)
