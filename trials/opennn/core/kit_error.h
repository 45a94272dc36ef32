// kit_error: the one exception type whose message is already fit for the result's `error`
// (kittrial.TrialError): no type name is prefixed to it.
#pragma once

#include <stdexcept>
#include <string>

namespace kit
{

class TrialError : public std::runtime_error
{
public:
    explicit TrialError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace kit
