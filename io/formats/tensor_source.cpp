#include "io/formats/tensor_source.hpp"

namespace ferry {

const char* to_string(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::f64: return "F64";
    case DType::u8: return "U8";
    case DType::i8: return "I8";
    case DType::i16: return "I16";
    case DType::u16: return "U16";
    case DType::i32: return "I32";
    case DType::u32: return "U32";
    case DType::i64: return "I64";
    case DType::u64: return "U64";
    case DType::boolean: return "BOOL";
    case DType::q8_0: return "Q8_0";
    case DType::mxfp4: return "MXFP4";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64:
    case DType::i64:
    case DType::u64: return 8;
    case DType::f32:
    case DType::i32:
    case DType::u32: return 4;
    case DType::f16:
    case DType::bf16:
    case DType::i16:
    case DType::u16: return 2;
    case DType::u8:
    case DType::i8:
    case DType::boolean: return 1;
    case DType::q8_0:
    case DType::mxfp4: return 0;
  }
  return 0;
}

}  // namespace ferry
