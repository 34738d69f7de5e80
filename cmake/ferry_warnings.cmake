add_library(ferry_options INTERFACE)
target_compile_options(ferry_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-missing-field-initializers>)
if(FERRY_WERROR)
  target_compile_options(ferry_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
if(FERRY_NATIVE)
  target_compile_options(ferry_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()
# Exactness: no fused multiply-add contraction and no fast-math on the CPU reference, so a result
# does not depend on which instructions the compiler picked for one call site over another.
target_compile_options(ferry_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)
if(FERRY_SANITIZE)
  target_compile_options(ferry_options INTERFACE -fsanitize=${FERRY_SANITIZE} -fno-omit-frame-pointer)
  target_link_options(ferry_options INTERFACE -fsanitize=${FERRY_SANITIZE})
endif()
target_include_directories(ferry_options INTERFACE ${PROJECT_SOURCE_DIR})

# ferry_library(NAME GLOBS... DEPS ...): a static library from the sources matching GLOBS (an
# INTERFACE library while a folder has none yet). Globs re-run at build time (CONFIGURE_DEPENDS), so
# adding a file to a folder needs no CMakeLists edit.
function(ferry_library name)
  cmake_parse_arguments(A "" "" "GLOBS;DEPS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${A_GLOBS})
  if(srcs)
    add_library(${name} STATIC ${srcs})
    target_link_libraries(${name} PUBLIC ferry_options ${A_DEPS})
  else()
    add_library(${name} INTERFACE)
    target_link_libraries(${name} INTERFACE ferry_options ${A_DEPS})
  endif()
endfunction()
