#!/bin/sh
# Fails if an object compiled for one SIMD family (its name contains avx512 or avx2)
# defines a weak / unique symbol outside its own namespace (m2::avx512 / m2::avx2; the
# int8 kernels' m2::int8_avx2 / m2::int8_avx512vnni / m2::int8_avxvnni, the int8 GEMM's
# m2::int8gemm_avx512vnni / m2::int8gemm_avx2; m2::avx512bf16, m2::avx512bf16gemv, m2::amxbf16,
# m2::avx512bf16attn).
# Such symbols (inline templates such as std::vector<float>::resize) are merged by the
# linker into one copy for the whole program, possibly the AVX-512 one, which then
# faults on a CPU without AVX-512. It also fails if such an object runs code at program
# start (a .init_array entry: a namespace-scope object with a constructor), which would
# execute that ISA's instructions on every CPU before any dispatch.
# Usage: check_isa_symbols.sh OBJECT...
status=0
for obj in "$@"; do
  case "$obj" in
    *avx512* | *avx2* | *avxvnni* | *amx*)
      if objdump -h "$obj" | grep -q '\.init_array'; then
        echo "$obj runs code at program start (.init_array): construct its objects on first use instead"
        status=1
      fi
      ;;
  esac
  case "$obj" in
    *linear_bf16_avx512*) ns='m2::avx512bf16::' ;;
    *linear_bf16_gemv_avx512*) ns='m2::avx512bf16gemv::' ;;
    *linear_bf16_amx*) ns='m2::amxbf16::' ;;
    *attention_avx512bf16*) ns='m2::avx512bf16attn::' ;;
    *linear_int8_avx512vnni*) ns='m2::int8_avx512vnni::' ;;
    *linear_int8_avxvnni*) ns='m2::int8_avxvnni::' ;;
    *linear_int8_avx2*) ns='m2::int8_avx2::' ;;
    *linear_int8_gemm_avx512*) ns='m2::int8gemm_avx512vnni::' ;;
    *linear_int8_gemm_avx2*) ns='m2::int8gemm_avx2::' ;;
    *avx512*) ns='m2::avx512::' ;;
    *avx2*) ns='m2::avx2::' ;;
    *) continue ;;
  esac
  bad=$(nm -C "$obj" | grep -E ' [WVu] ' | grep -v " $ns" | grep -v "guard variable for $ns" || true)
  if [ -n "$bad" ]; then
    echo "$obj defines shared inline symbols outside $ns (the linker may keep this ISA's copy for every CPU):"
    echo "$bad"
    status=1
  fi
done
[ $status -eq 0 ] && echo "ISA objects define no shared inline symbols outside their namespaces and run nothing at program start"
exit $status
