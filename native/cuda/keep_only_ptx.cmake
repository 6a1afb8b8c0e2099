# cmake -DDIR=... -P keep_only_ptx.cmake: removes nvcc's kept intermediates
# in DIR except the PTX that tests/cuda/ptx_check.sh reads (the preprocessed
# sources and cubins beside it are about 200 MB).
file(GLOB _kept "${DIR}/*")
foreach(_file IN LISTS _kept)
  if(NOT _file MATCHES "\\.ptx$")
    file(REMOVE "${_file}")
  endif()
endforeach()
