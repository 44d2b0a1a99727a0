//! Table names from Flight descriptors.

use arrow_flight::FlightDescriptor;
use arrow_flight::flight_descriptor::DescriptorType;

use crate::{Error, Result};

/// The table a descriptor names: its path segments joined with `/`, or its
/// command bytes as UTF-8. `["taxi", "2024"]` and `cmd = b"taxi/2024"` name the
/// same table.
pub fn table_name(descriptor: &FlightDescriptor) -> Result<String> {
    let name = match DescriptorType::try_from(descriptor.r#type) {
        Ok(DescriptorType::Path) => {
            if descriptor.path.is_empty() {
                return Err(Error::invalid("descriptor path is empty"));
            }
            descriptor.path.join("/")
        }
        Ok(DescriptorType::Cmd) => String::from_utf8(descriptor.cmd.to_vec())
            .map_err(|_| Error::invalid("descriptor command is not a UTF-8 table name"))?,
        _ => {
            return Err(Error::invalid(format!(
                "descriptor type {} is neither PATH nor CMD",
                descriptor.r#type
            )));
        }
    };
    quiver_store::validate_name(&name)?;
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_and_cmd_name_the_same_table() {
        let path = FlightDescriptor::new_path(vec!["taxi".into(), "2024".into()]);
        let cmd = FlightDescriptor::new_cmd("taxi/2024");
        assert_eq!(table_name(&path).unwrap(), "taxi/2024");
        assert_eq!(table_name(&cmd).unwrap(), "taxi/2024");
    }

    #[test]
    fn refuses_empty_and_non_utf8() {
        assert!(table_name(&FlightDescriptor::new_path(vec![])).is_err());
        assert!(table_name(&FlightDescriptor::new_cmd(vec![0xff, 0xfe])).is_err());
        assert!(table_name(&FlightDescriptor::new_cmd("")).is_err());
        let mut unknown = FlightDescriptor::new_cmd("x");
        unknown.r#type = 7;
        assert!(table_name(&unknown).is_err());
    }
}
