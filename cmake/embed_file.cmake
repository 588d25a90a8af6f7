# cmake -DINPUT=file -DOUTPUT=file.cc -DNAME=fn -DNAMESPACE=ns -P embed_file.cmake
# Writes a C++ source whose function NAMESPACE::NAME() returns the bytes of INPUT (the server's
# page: one binary, nothing to install beside it).
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" body "${body}")
file(WRITE "${OUTPUT}.tmp" "// Generated from ${INPUT} by cmake/embed_file.cmake; do not edit.\n"
     "#include <string_view>\n\nnamespace ${NAMESPACE} {\nnamespace {\n"
     "const unsigned char kBytes[${bytes} + 1] = {\n${body}0};\n}  // namespace\n\n"
     "std::string_view ${NAME}() {\n"
     "  return {reinterpret_cast<const char*>(kBytes), ${bytes}};\n}\n\n}  // namespace ${NAMESPACE}\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
