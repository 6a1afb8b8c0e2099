# The C API (include/entgraph/entgraph.h, docs/C_API.md): part of
# entgraph_core in every build, wasm included; included by
# core/CMakeLists.txt once entgraph_core exists.
target_sources(entgraph_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/c_api_errors.cpp
  ${CMAKE_CURRENT_LIST_DIR}/c_api_transforms.cpp
  ${CMAKE_CURRENT_LIST_DIR}/c_api_dlpack.cpp
  ${CMAKE_CURRENT_LIST_DIR}/c_api_attention.cpp
  ${CMAKE_CURRENT_LIST_DIR}/c_api_batched.cpp
  ${CMAKE_CURRENT_LIST_DIR}/c_api_graphs.cpp
  ${CMAKE_CURRENT_LIST_DIR}/c_api_captures.cpp
  ${CMAKE_CURRENT_LIST_DIR}/c_api_predictors.cpp
  ${CMAKE_CURRENT_LIST_DIR}/c_api_teacher.cpp)
set_property(SOURCE ${CMAKE_CURRENT_LIST_DIR}/c_api_errors.cpp APPEND PROPERTY
             COMPILE_DEFINITIONS ENTGRAPH_VERSION="${PROJECT_VERSION}")

# libentgraph_c.so, for Python's ctypes and other FFIs that need a shared
# library: the whole static core (compiled position-independent) linked into
# one, exporting the eg_* functions only, so that its C++ symbols (and the
# libstdc++ inlines in them) cannot clash with the host's.
option(ENTGRAPH_BUILD_SHARED_C_API "Build libentgraph_c.so, the C API as a shared library" ${ENTGRAPH_TOP_LEVEL})
if(ENTGRAPH_BUILD_SHARED_C_API AND NOT EMSCRIPTEN)
  # The header stands in as the source list (add_library needs one); all
  # code comes from entgraph_core.
  add_library(entgraph_c SHARED ${CMAKE_CURRENT_SOURCE_DIR}/include/entgraph/entgraph.h)
  add_library(entgraph::c ALIAS entgraph_c)
  target_link_libraries(entgraph_c PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,entgraph_core>")
  target_include_directories(entgraph_c INTERFACE
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_options(entgraph_c PRIVATE "LINKER:--version-script=${CMAKE_CURRENT_LIST_DIR}/entgraph_c.map")
  set_target_properties(entgraph_c PROPERTIES LINKER_LANGUAGE CXX LINK_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/entgraph_c.map)
  if(ENTGRAPH_INSTALL)
    install(TARGETS entgraph_c LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  endif()
endif()
