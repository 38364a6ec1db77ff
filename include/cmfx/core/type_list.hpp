#pragma once
/// @file type_list.hpp
/// @brief A minimal compile-time type list and for_each over it.
#include <cstddef>
#include <type_traits>

namespace cmfx {

template <class... Ts>
struct type_list {
  static constexpr std::size_t size = sizeof...(Ts);
};

/// Calls f.template operator()<T>() for each T of the list, in order.
template <class... Ts, class F>
constexpr void for_each_type(type_list<Ts...>, F&& f) {
  (f.template operator()<Ts>(), ...);
}

/// True when T is one of Ts.
template <class T, class List>
struct contains;
template <class T, class... Ts>
struct contains<T, type_list<Ts...>> : std::bool_constant<(std::is_same_v<T, Ts> || ...)> {};

}  // namespace cmfx
